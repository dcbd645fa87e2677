/* The Arrow C Data Interface, C Device Data Interface, C Stream Interface and
 * C Device Stream Interface, written for dlpack-bridge from the Arrow
 * specification (CDataInterface.rst, CDeviceDataInterface.rst,
 * CStreamInterface.rst).
 *
 * Like dlpack.h this is read by cffi's cdef parser (no preprocessor
 * conditionals, so no ARROW_C_DATA_INTERFACE guard here) and by the compiler;
 * the protocol files of cdefs/ include it through core.h, and
 * tests/test_native.py recompiles these declarations against pyarrow's
 * arrow/c/abi.h so any layout drift fails a test. */

#define ARROW_FLAG_DICTIONARY_ORDERED 1
#define ARROW_FLAG_NULLABLE 2
#define ARROW_FLAG_MAP_KEYS_SORTED 4

struct ArrowSchema {
  const char *format;
  const char *name;
  const char *metadata;
  int64_t flags;
  int64_t n_children;
  struct ArrowSchema **children;
  struct ArrowSchema *dictionary;
  void (*release)(struct ArrowSchema *);
  void *private_data;
};

struct ArrowArray {
  int64_t length;
  int64_t null_count;
  int64_t offset;
  int64_t n_buffers;
  int64_t n_children;
  const void **buffers;
  struct ArrowArray **children;
  struct ArrowArray *dictionary;
  void (*release)(struct ArrowArray *);
  void *private_data;
};

typedef int32_t ArrowDeviceType;

/* The device types bridge names (Arrow's values, equal to DLPack's). */
#define ARROW_DEVICE_CPU 1
#define ARROW_DEVICE_CUDA 2
#define ARROW_DEVICE_CUDA_HOST 3

struct ArrowDeviceArray {
  struct ArrowArray array;
  int64_t device_id;
  ArrowDeviceType device_type;
  void *sync_event;
  int64_t reserved[3];
};

struct ArrowArrayStream {
  int (*get_schema)(struct ArrowArrayStream *, struct ArrowSchema *out);
  int (*get_next)(struct ArrowArrayStream *, struct ArrowArray *out);
  const char *(*get_last_error)(struct ArrowArrayStream *);
  void (*release)(struct ArrowArrayStream *);
  void *private_data;
};

struct ArrowDeviceArrayStream {
  ArrowDeviceType device_type;
  int (*get_schema)(struct ArrowDeviceArrayStream *, struct ArrowSchema *out);
  int (*get_next)(struct ArrowDeviceArrayStream *, struct ArrowDeviceArray *out);
  const char *(*get_last_error)(struct ArrowDeviceArrayStream *);
  void (*release)(struct ArrowDeviceArrayStream *);
  void *private_data;
};
