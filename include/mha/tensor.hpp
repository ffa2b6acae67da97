// Non-owning tensor views: how callers hand data to mha without copies.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

namespace mha {

// kFloat8E4M3 and kFloat8E5M2 (PyTorch's float8_e4m3fn and float8_e5m2) are KV cache
// storage kinds only; no tensor argument takes them.
enum class DType {
  kFloat32,
  kBool,
  kInt32,
  kInt64,
  kBFloat16,
  kInt8,
  kFloat8E4M3,
  kFloat8E5M2,
  kInt4  // a KV cache's storage only (two codes to a byte): no tensor holds it
};

const char* DTypeName(DType dtype);
size_t DTypeSize(DType dtype);

// Dimensions of a dense row-major tensor, rank 0 to 4.
class Shape {
 public:
  static constexpr int kMaxRank = 4;

  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);
  Shape(const int64_t* dims, size_t rank);  // fails (mha::Error) past kMaxRank

  int rank() const { return rank_; }
  int64_t operator[](int axis) const { return dims_[axis]; }
  bool operator==(const Shape& other) const;
  bool operator!=(const Shape& other) const { return !(*this == other); }
  std::string ToString() const;        // "[2, 5, 8]"
  Shape Prepended(int64_t dim) const;  // [dim, ...this]; fails past kMaxRank

 private:
  int rank_ = 0;
  int64_t dims_[kMaxRank] = {};
};

// A view of caller memory, read-only (TensorView) or written (MutableTensorView,
// float32 or bfloat16 outputs). A view with neither data nor a shape (as
// default-constructed) is "absent"; one with a shape is present even when it holds no
// elements, so a zero-size tensor is checked (and refused) as the shape it has.
//
// Row-major unless strided: strides[i] (in elements) steps axis i for every axis but
// the last, which is contiguous; all-zero strides mean dense. The attention core
// (ScaledDotProductAttention) reads strided query, key, value and output views, e.g.
// slices of a fused QKV buffer; every other argument must be dense.
template <class Pointer>
struct StridedView {
  Pointer data = nullptr;
  DType dtype = DType::kFloat32;
  Shape shape;
  int64_t strides[Shape::kMaxRank - 1] = {};

  StridedView() = default;
  StridedView(Pointer values, DType type, Shape dims)
      : data(values), dtype(type), shape(dims) {}

  bool present() const { return data != nullptr || shape.rank() > 0; }
  bool dense() const { return !strides[0] && !strides[1] && !strides[2]; }
  // This view with the given strides (outer axis first).
  StridedView WithStrides(int64_t outer, int64_t middle, int64_t inner) const {
    StridedView view = *this;
    view.strides[0] = outer, view.strides[1] = middle, view.strides[2] = inner;
    return view;
  }
};

struct TensorView : StridedView<const void*> {
  using StridedView::StridedView;
  TensorView() = default;
  TensorView(const float* values, Shape dims)
      : StridedView(values, DType::kFloat32, dims) {}
  TensorView(const StridedView& view) : StridedView(view) {}  // NOLINT: a view is a view
  const float* floats() const { return static_cast<const float*>(data); }
};

struct MutableTensorView : StridedView<void*> {
  using StridedView::StridedView;
  MutableTensorView() = default;
  MutableTensorView(float* values, Shape dims)
      : StridedView(values, DType::kFloat32, dims) {}
  MutableTensorView(const StridedView& view) : StridedView(view) {}  // NOLINT
  float* floats() const { return static_cast<float*>(data); }
};

}  // namespace mha
