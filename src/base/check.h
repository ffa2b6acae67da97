// Helpers that build mha::Error messages naming the argument and the values seen.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <sstream>
#include <string>
#include <utility>

#include "mha/error.hpp"
#include "mha/tensor.hpp"

namespace mha::internal {

template <class... Parts>
[[noreturn]] void Fail(Parts&&... parts) {
  std::ostringstream message;
  message << "mha: ";
  (message << ... << std::forward<Parts>(parts));
  throw Error(message.str());
}

// Product of a shape's dimensions; fails when a dimension is negative or when the
// element count or its byte size overflows int64.
int64_t CheckedNumElements(const char* name, const Shape& shape, size_t element_size);

// Data for a shape's elements: null only when the shape holds none.
void CheckData(const char* name, const void* data, const Shape& shape,
               size_t element_size);

// A present tensor of the given dtype and shape, or fails naming `name`.
void CheckTensor(const char* name, const TensorView& tensor, DType dtype,
                 const Shape& expected);
// An output of `expected` shape, float32 (or bfloat16 when bf16_allowed).
void CheckOutput(const char* name, const MutableTensorView& tensor, const Shape& expected,
                 bool bf16_allowed = false);

// The most bytes one allocation may ask for: x86-64's user address space. Sizes
// beyond it are errors of the arguments that give them, never an allocation attempt.
inline constexpr int64_t kMaxAddressableBytes = int64_t{1} << 47;

// The product of `factors` into *product; false when a factor is negative or the
// product overflows int64 or exceeds kMaxAddressableBytes.
bool AddressableProduct(std::initializer_list<int64_t> factors, int64_t* product);

// A per-call thread count: 0 (OpenMP's default) to kMaxThreads.
void CheckThreadCount(const char* name, int num_threads);

// Attention's compute dtype: float32 or bfloat16.
void CheckComputeDtype(const char* name, DType dtype);

// Element i of an int32 or int64 tensor (checked by the caller).
int64_t IntegerAt(const TensorView& tensor, int64_t i);

}  // namespace mha::internal
