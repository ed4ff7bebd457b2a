/* The DLPack structures (the legacy, unversioned ABI that every consumer
 * accepts: torch.from_dlpack, numpy.from_dlpack, JAX, CuPy), written out
 * from the published specification so that the package needs no header
 * from another project. A producer hands out a PyCapsule named "dltensor"
 * holding a DLManagedTensor; the consumer renames it "used_dltensor" and
 * calls deleter when it no longer needs the memory. */
#ifndef STOKER_PY_DLPACK_H
#define STOKER_PY_DLPACK_H

#include <stdint.h>

enum { kDLCPU = 1, kDLCUDA = 2, kDLCUDAHost = 3 };
enum { kDLInt = 0, kDLUInt = 1, kDLFloat = 2 };

typedef struct {
  int32_t device_type;
  int32_t device_id;
} DLDevice;

typedef struct {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
} DLDataType;

typedef struct {
  void *data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t *shape;
  int64_t *strides; /* in elements; NULL = compact row-major */
  uint64_t byte_offset;
} DLTensor;

typedef struct DLManagedTensor {
  DLTensor dl_tensor;
  void *manager_ctx;
  void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;

#endif
