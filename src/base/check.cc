// Argument checks shared by the layer, the reference and the weight packer.
#include "src/base/check.h"

#include "mha/config.hpp"

namespace mha::internal {

int64_t CheckedNumElements(const char* name, const Shape& shape, size_t element_size) {
  int64_t count = 1;
  for (int axis = 0; axis < shape.rank(); ++axis) {
    if (shape[axis] < 0) Fail(name, ": negative dimension in shape ", shape.ToString());
    if (__builtin_mul_overflow(count, shape[axis], &count)) {
      Fail(name, ": element count of shape ", shape.ToString(), " overflows int64");
    }
  }
  int64_t bytes = 0;
  if (__builtin_mul_overflow(count, static_cast<int64_t>(element_size), &bytes)) {
    Fail(name, ": byte size of shape ", shape.ToString(), " overflows int64");
  }
  return count;
}

void CheckData(const char* name, const void* data, const Shape& shape,
               size_t element_size) {
  if (CheckedNumElements(name, shape, element_size) > 0 && data == nullptr) {
    Fail(name, ": data is null for shape ", shape.ToString());
  }
}

namespace {

// Strided views are the attention core's query, key, value and output only.
template <class View>
void CheckDense(const char* name, const View& view) {
  if (!view.dense()) {
    Fail(name,
         ": must be dense (only the attention core's query, key, value and output "
         "may be strided), got strides [",
         view.strides[0], ", ", view.strides[1], ", ", view.strides[2], "]");
  }
}

}  // namespace

void CheckTensor(const char* name, const TensorView& tensor, DType dtype,
                 const Shape& expected) {
  if (!tensor.present()) Fail(name, ": data is null");
  CheckDense(name, tensor);
  if (tensor.dtype != dtype) {
    Fail(name, ": expected dtype ", DTypeName(dtype), ", got ", DTypeName(tensor.dtype));
  }
  if (tensor.shape != expected) {
    Fail(name, ": expected shape ", expected.ToString(), ", got ",
         tensor.shape.ToString());
  }
  CheckData(name, tensor.data, tensor.shape, DTypeSize(dtype));
}

bool AddressableProduct(std::initializer_list<int64_t> factors, int64_t* product) {
  int64_t total = 1;
  for (const int64_t factor : factors) {
    if (factor < 0 || __builtin_mul_overflow(total, factor, &total)) return false;
  }
  *product = total;
  return total <= kMaxAddressableBytes;
}

void CheckThreadCount(const char* name, int num_threads) {
  if (num_threads < 0 || num_threads > kMaxThreads) {
    Fail(name, ": must be in [0, ", kMaxThreads, "] (0: OpenMP's default), got ",
         num_threads);
  }
}

void CheckComputeDtype(const char* name, DType dtype) {
  if (dtype != DType::kFloat32 && dtype != DType::kBFloat16) {
    Fail(name, ": must be float32 or bfloat16, got ", DTypeName(dtype));
  }
}

int64_t IntegerAt(const TensorView& tensor, int64_t i) {
  return tensor.dtype == DType::kInt32 ? static_cast<const int32_t*>(tensor.data)[i]
                                       : static_cast<const int64_t*>(tensor.data)[i];
}

void CheckOutput(const char* name, const MutableTensorView& tensor, const Shape& expected,
                 bool bf16_allowed) {
  if (!tensor.present()) Fail(name, ": data is null");
  CheckDense(name, tensor);
  if (tensor.dtype != DType::kFloat32 &&
      !(bf16_allowed && tensor.dtype == DType::kBFloat16)) {
    Fail(name, ": expected dtype float32", bf16_allowed ? " or bfloat16" : "", ", got ",
         DTypeName(tensor.dtype));
  }
  if (tensor.shape != expected) {
    Fail(name, ": expected shape ", expected.ToString(), ", got ",
         tensor.shape.ToString());
  }
  CheckData(name, tensor.data, tensor.shape, DTypeSize(tensor.dtype));
}

}  // namespace mha::internal
