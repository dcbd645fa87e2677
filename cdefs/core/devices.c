/* The device table: every DLPack device type bridge knows, the name bridge
 * (and PyTorch) gives it, whether the host reads and writes its memory, and
 * the Arrow C Device Interface type bridge exchanges it as. The one place a
 * device kind is described: bridge.device's names (bridge/core/device.py),
 * the DLPack importer's known types, Arrow's device mapping both ways and
 * "can bridge copy between these two devices" all read it. Adding a device
 * type is a line here (and its value in dlpack.h, or dlpack_next.h before DLPack releases it). No Python here: cffi
 * exposes these functions as they are. */

#include <stddef.h>
#include <stdint.h>

#include "dlpack.h"
#include "dlpack_next.h"
#include "arrow_c_data.h"
#include "bridge.h"

typedef struct {
  int dl;          /* DLDeviceType */
  const char *name;
  int host;        /* the host reads and writes this memory */
  int arrow;       /* the ArrowDeviceType bridge exchanges it as; 0: none */
} device_kind;

/* Arrow's device types take DLPack's values; bridge exchanges through Arrow
 * the kinds its copy engine and streams know (host, CUDA, CUDA host). */
static const device_kind kinds[] = {
    {kDLCPU, "cpu", 1, ARROW_DEVICE_CPU},
    {kDLCUDA, "cuda", 0, ARROW_DEVICE_CUDA},
    {kDLCUDAHost, "cuda_host", 1, ARROW_DEVICE_CUDA_HOST},
    {kDLOpenCL, "opencl", 0, 0},
    {kDLVulkan, "vulkan", 0, 0},
    {kDLMetal, "metal", 0, 0},
    {kDLVPI, "vpi", 0, 0},
    {kDLROCM, "rocm", 0, 0},
    {kDLROCMHost, "rocm_host", 1, 0},
    {kDLExtDev, "ext_dev", 0, 0},
    {kDLCUDAManaged, "cuda_managed", 1, 0},
    {kDLOneAPI, "oneapi", 0, 0},
    {kDLWebGPU, "webgpu", 0, 0},
    {kDLHexagon, "hexagon", 0, 0},
    {kDLMAIA, "maia", 0, 0},
    {kDLTrn, "trn", 0, 0},
    {kDLTPU, "tpu", 0, 0},
    {kDLTPUHost, "tpu_host", 1, 0},
    {kDLAscend, "ascend", 0, 0},
};
#define NKINDS ((int)(sizeof kinds / sizeof kinds[0]))

static const device_kind *kind_of(int dev_type) {
  for (int i = 0; i < NKINDS; i++)
    if (kinds[i].dl == dev_type) return &kinds[i];
  return NULL;
}

const char *bridge_device_name(int dev_type) {
  const device_kind *k = kind_of(dev_type);
  return k ? k->name : NULL;
}

int bridge_device_type_at(int i) { return i >= 0 && i < NKINDS ? kinds[i].dl : 0; }

int bridge_host_accessible(int dev_type) {
  if (dev_type == kDLCPU) return 1; /* the common case, asked per item(): no table walk (the table says the same) */
  const device_kind *k = kind_of(dev_type);
  return k != NULL && k->host;
}

int bridge_device_to_arrow(int dev_type) {
  const device_kind *k = kind_of(dev_type);
  return k ? k->arrow : 0;
}

int bridge_device_from_arrow(int arrow_type) {
  for (int i = 0; arrow_type != 0 && i < NKINDS; i++)
    if (kinds[i].arrow == arrow_type) return kinds[i].dl;
  return 0;
}

int bridge_device_copyable(int from, int to) {
  /* the CUDA copy engine: one side CUDA memory, the other CUDA memory or
   * memory the host reads; a new copy lands in CPU or CUDA memory (CUDA host
   * memory is host memory to it) */
  int from_ok = from == kDLCUDA || bridge_host_accessible(from);
  int to_ok = to == kDLCUDA || to == kDLCPU || to == kDLCUDAHost;
  return (from == kDLCUDA || to == kDLCUDA) && from_ok && to_ok;
}
