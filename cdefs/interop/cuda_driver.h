/* The CUDA driver API as bridge loads it (cuda.c) and the copy engine uses
 * it (cuda_copy.c): a few types of cuda.h, the function table filled at first
 * use, and the helpers that enter a device's context. Internal to
 * cdefs/interop. */

#ifndef BRIDGE_CUDA_DRIVER_H
#define BRIDGE_CUDA_DRIVER_H

#include "interop.h"

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext, *CUstream, *CUevent;
typedef unsigned long long CUdeviceptr;
#define CU_EVENT_DISABLE_TIMING 0x2
#define CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL 9
#define CU_DEVICE_ATTRIBUTE_MAX_PITCH 11
#define CU_MEMORYTYPE_HOST 1
#define CU_MEMORYTYPE_DEVICE 2
#define MAX_DEVICES 64

/* cuda.h's CUDA_MEMCPY2D (the _v2 layout: size_t fields). */
typedef struct {
  size_t srcXInBytes, srcY;
  int srcMemoryType;
  const void *srcHost;
  CUdeviceptr srcDevice;
  void *srcArray;
  size_t srcPitch;
  size_t dstXInBytes, dstY;
  int dstMemoryType;
  void *dstHost;
  CUdeviceptr dstDevice;
  void *dstArray;
  size_t dstPitch;
  size_t WidthInBytes, Height;
} CUDA_MEMCPY2D;

typedef struct {
  int state; /* 0 not tried, 1 loaded, -1 unavailable */
  CUresult (*Init)(unsigned);
  CUresult (*DeviceGet)(CUdevice *, int);
  CUresult (*DeviceGetAttribute)(int *, int, CUdevice);
  CUresult (*PrimaryCtxRetain)(CUcontext *, CUdevice);
  CUresult (*CtxPushCurrent)(CUcontext);
  CUresult (*CtxPopCurrent)(CUcontext *);
  CUresult (*EventCreate)(CUevent *, unsigned);
  CUresult (*EventRecord)(CUevent, CUstream);
  CUresult (*StreamWaitEvent)(CUstream, CUevent, unsigned);
  CUresult (*EventDestroy)(CUevent);
  CUresult (*PointerGetAttribute)(void *, int, CUdeviceptr);
  CUresult (*MemAlloc)(CUdeviceptr *, size_t);
  CUresult (*MemFree)(CUdeviceptr);
  CUresult (*MemcpyHtoDAsync)(CUdeviceptr, const void *, size_t, CUstream);
  CUresult (*MemcpyDtoHAsync)(void *, CUdeviceptr, size_t, CUstream);
  CUresult (*MemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
  CUresult (*Memcpy2DAsync)(const CUDA_MEMCPY2D *, CUstream);
  CUresult (*StreamSynchronize)(CUstream);
  CUresult (*GetErrorName)(CUresult, const char **);
  CUresult (*GetErrorString)(CUresult, const char **);
} bridge_cuda_driver;
extern bridge_cuda_driver bridge_cu;
/* The device's maximum pitch of a 2-d copy, in bytes (0: unknown, rows are
 * copied one call each); known once the device was entered. */
extern size_t bridge_cuda_max_pitch[MAX_DEVICES];

/* `exc` naming the failed call, the CUDA error's name and its description; -1. */
int bridge_cuda_error(PyObject *exc, CUresult rc, const char *what);
/* Make device `dev`'s primary context current on this thread (pushed; pop
 * with bridge_cuda_leave()); `exc` when there is no driver or the device
 * cannot open. */
int bridge_cuda_enter(int dev, PyObject *exc);
void bridge_cuda_leave(void);
/* In an entered context, without the GIL: make `consumer` wait for the work
 * enqueued so far on `producer`. 0 or the failing call's result, *what naming it. */
CUresult bridge_cuda_order_streams(uintptr_t producer, uintptr_t consumer, const char **what);
/* A storage over `nbytes` of new memory on cuda:`dev`; MemoryError when the
 * driver has no room, `exc` without a driver. */
StorageObject *bridge_cuda_alloc(int dev, int64_t nbytes, PyObject *exc);

#endif /* BRIDGE_CUDA_DRIVER_H */
