/* DLPack's main branch, after v1.3: the values its v1.3 header (dlpack.h,
 * kept exactly as released) lacks. Read by cffi after dlpack.h, and included
 * by the C that names them (the device table, the importer's dtype message). */

#define kDLTPU 19      /* DLDeviceType: Google TPU memory */
#define kDLTPUHost 20  /* DLDeviceType: TPU host memory */
#define kDLAscend 21   /* DLDeviceType: Huawei Ascend NPU memory */
#define kDLBcomplex 18 /* DLDataTypeCode: complex of two bfloat16 halves */
