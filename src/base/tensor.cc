// Shape and DType helpers behind include/mha/tensor.hpp.
#include "mha/tensor.hpp"

#include <algorithm>
#include <sstream>

#include "mha/error.hpp"

namespace mha {

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "float32";
    case DType::kBool:
      return "bool";
    case DType::kInt32:
      return "int32";
    case DType::kInt64:
      return "int64";
    case DType::kBFloat16:
      return "bfloat16";
    case DType::kInt8:
      return "int8";
    case DType::kFloat8E4M3:
      return "float8_e4m3fn";
    case DType::kFloat8E5M2:
      return "float8_e5m2";
    case DType::kInt4:
      return "int4";
  }
  return "unknown";
}

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kBool:
    case DType::kInt8:
    case DType::kFloat8E4M3:
    case DType::kFloat8E5M2:
      return 1;
    case DType::kBFloat16:
      return 2;
    case DType::kFloat32:
    case DType::kInt32:
      return 4;
    case DType::kInt64:
      return 8;
    case DType::kInt4:  // no whole byte per element
      return 0;
  }
  return 0;
}

Shape::Shape(std::initializer_list<int64_t> dims) : Shape(dims.begin(), dims.size()) {}

Shape::Shape(const int64_t* dims, size_t rank) {
  if (rank > kMaxRank) {
    throw Error("mha: Shape: rank " + std::to_string(rank) + " exceeds the maximum " +
                std::to_string(kMaxRank));
  }
  rank_ = static_cast<int>(rank);
  std::copy_n(dims, rank_, dims_);
}

bool Shape::operator==(const Shape& other) const {
  return rank_ == other.rank_ && std::equal(dims_, dims_ + rank_, other.dims_);
}

Shape Shape::Prepended(int64_t dim) const {
  if (rank_ == kMaxRank) throw Error("mha: Shape: cannot prepend to " + ToString());
  Shape result;
  result.rank_ = rank_ + 1;
  result.dims_[0] = dim;
  std::copy_n(dims_, rank_, result.dims_ + 1);
  return result;
}

std::string Shape::ToString() const {
  std::ostringstream out;
  out << '[';
  for (int axis = 0; axis < rank_; ++axis) out << (axis ? ", " : "") << dims_[axis];
  out << ']';
  return out.str();
}

}  // namespace mha
