// Conversions between numpy arrays and mha tensor views.
#include "src/python/arrays.h"

#include <string>
#include <vector>

namespace mha::python {
namespace {

// torch tensors convert through .numpy() (on the CPU), so torch is never required.
py::object AsNumpy(py::handle object) {
  if (py::hasattr(object, "detach") && py::hasattr(object, "numpy")) {
    return object.attr("detach")().attr("cpu")().attr("numpy")();
  }
  return py::reinterpret_borrow<py::object>(object);
}

template <class T>
py::array Ensure(py::handle object, const char* name) {
  py::array array =
      py::array_t<T, py::array::c_style | py::array::forcecast>::ensure(AsNumpy(object));
  if (!array) {
    PyErr_Clear();
    throw py::value_error(std::string("mha: ") + name +
                          ": expected a numeric array, got " +
                          std::string(py::str(py::type::of(object))));
  }
  return array;
}

Input Viewed(py::array array, DType dtype, const char* name) {
  const Shape shape = ShapeOf(array, name);
  const void* data = array.data();
  return {std::move(array), TensorView(data, dtype, shape)};
}

}  // namespace

Shape ShapeOf(const py::array& array, const char* name) {
  if (array.ndim() > Shape::kMaxRank) {
    throw py::value_error(std::string("mha: ") + name + ": at most " +
                          std::to_string(Shape::kMaxRank) + " dimensions, got " +
                          std::to_string(array.ndim()));
  }
  std::vector<int64_t> dims(array.shape(), array.shape() + array.ndim());
  return Shape(dims.data(), dims.size());
}

Input FloatInput(py::handle object, const char* name) {
  if (object.is_none()) return {};
  return Viewed(Ensure<float>(object, name), DType::kFloat32, name);
}

Input MaskInput(py::handle object, const char* name) {
  if (object.is_none()) return {};
  const py::array array = py::array::ensure(AsNumpy(object));
  if (array && array.dtype().is(py::dtype::of<bool>())) {
    return Viewed(Ensure<bool>(array, name), DType::kBool, name);
  }
  // PyTorch refuses integer masks: a 0/1 integer mask added as numbers would leave
  // padded keys visible.
  if (array && array.dtype().kind() != 'f') {
    throw py::value_error(std::string("mha: ") + name +
                          ": expected a bool or floating-point mask, got dtype " +
                          std::string(py::str(array.dtype())) +
                          " (convert with .astype(bool) for true = masked)");
  }
  return FloatInput(object, name);
}

Input IndexInput(py::handle object, const char* name) {
  if (object.is_none()) return {};
  const py::array array = py::array::ensure(AsNumpy(object));
  if (array && array.dtype().is(py::dtype::of<int32_t>())) {
    return Viewed(Ensure<int32_t>(array, name), DType::kInt32, name);
  }
  return Viewed(Ensure<int64_t>(object, name), DType::kInt64, name);
}

py::array_t<float> NewFloats(const Shape& shape) {
  std::vector<py::ssize_t> dims;
  for (int axis = 0; axis < shape.rank(); ++axis) dims.push_back(shape[axis]);
  return py::array_t<float>(dims);
}

MutableTensorView ViewOf(py::array_t<float>& array) {
  return MutableTensorView(array.mutable_data(), ShapeOf(array, "output"));
}

}  // namespace mha::python
