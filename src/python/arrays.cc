// Conversions between numpy arrays or torch tensors and mha tensor views.
#include "src/python/arrays.h"

#include <cstdint>
#include <string>
#include <vector>

namespace mha::python {

// Matched by the type's module, so that torch need not be importable.
bool IsTorchTensor(py::handle object) {
  const std::string module = py::str(py::type::of(object).attr("__module__"));
  return module.rfind("torch", 0) == 0 && py::hasattr(object, "data_ptr");
}

namespace {

py::value_error ArgumentError(const char* name, const std::string& message) {
  return py::value_error(std::string("mha: ") + name + ": " + message);
}

std::string TorchDtype(py::handle tensor) { return py::str(tensor.attr("dtype")); }

py::object TorchInt16() { return py::module_::import("torch").attr("int16"); }

// A torch tensor as a numpy array sharing its memory (detached, on the CPU, made
// contiguous only if it is not); bfloat16 as its int16 bits when `bf16` is given,
// else converted to float32. Anything else is returned as it is.
py::object AsNumpy(py::handle object, bool* bf16 = nullptr) {
  if (!IsTorchTensor(object)) return py::reinterpret_borrow<py::object>(object);
  py::object tensor = object.attr("detach")().attr("cpu")();
  if (!tensor.attr("is_contiguous")().cast<bool>()) tensor = tensor.attr("contiguous")();
  if (TorchDtype(tensor) == "torch.bfloat16") {
    if (bf16 == nullptr) return tensor.attr("float")().attr("numpy")();
    *bf16 = true;
    tensor = tensor.attr("view")(TorchInt16());
  }
  return tensor.attr("numpy")();
}

template <class T>
py::array Ensure(py::handle converted, py::handle original, const char* name) {
  py::array array =
      py::array_t<T, py::array::c_style | py::array::forcecast>::ensure(converted);
  if (!array) {
    PyErr_Clear();
    throw ArgumentError(name, "expected a numeric array, got " +
                                  std::string(py::str(py::type::of(original))));
  }
  return array;
}

Input Viewed(py::array array, DType dtype, const char* name) {
  const Shape shape = ShapeOf(array, name);
  const void* data = array.data();
  return {std::move(array), TensorView(data, dtype, shape)};
}

py::object TorchEmpty(const Shape& shape, DType dtype) {
  const py::module_ torch = py::module_::import("torch");
  py::list dims;
  for (int axis = 0; axis < shape.rank(); ++axis) dims.append(shape[axis]);
  return torch.attr("empty")(
      dims,
      py::arg("dtype") = torch.attr(dtype == DType::kBFloat16 ? "bfloat16" : "float32"));
}

// A float32 or bfloat16 torch tensor's memory as a writable numpy array.
py::array TorchWritable(py::handle tensor, DType dtype) {
  py::object detached = tensor.attr("detach")();
  if (dtype == DType::kBFloat16) detached = detached.attr("view")(TorchInt16());
  return detached.attr("numpy")();
}

// The dtype a caller's out= tensor or array is written as, or ValueError.
DType CallerOutputDtype(py::handle out) {
  if (IsTorchTensor(out)) {
    const std::string dtype = TorchDtype(out);
    if (dtype != "torch.float32" && dtype != "torch.bfloat16") {
      throw ArgumentError("out", "expected a float32 or bfloat16 tensor, got " + dtype);
    }
    const std::string device = py::str(out.attr("device").attr("type"));
    if (device != "cpu" || !out.attr("is_contiguous")().cast<bool>()) {
      throw ArgumentError("out", "expected a contiguous CPU tensor, got one on " +
                                     device + " with strides " +
                                     std::string(py::str(out.attr("stride")())));
    }
    return dtype == "torch.bfloat16" ? DType::kBFloat16 : DType::kFloat32;
  }
  if (!py::isinstance<py::array>(out)) {
    throw ArgumentError("out", "expected a numpy array or torch tensor, got " +
                                   std::string(py::str(py::type::of(out))));
  }
  const py::array array = py::reinterpret_borrow<py::array>(out);
  if (!array.dtype().is(py::dtype::of<float>()) ||
      !(array.flags() & py::array::c_style) || !array.writeable()) {
    throw ArgumentError(
        "out", "expected a C-contiguous, writable float32 array, got " +
                   std::string(py::str(array.dtype())) +
                   (array.writeable() ? "" : ", read-only") +
                   ((array.flags() & py::array::c_style) ? "" : ", not C-contiguous"));
  }
  return DType::kFloat32;
}

}  // namespace

Shape ShapeOf(const py::array& array, const char* name) {
  if (array.ndim() > Shape::kMaxRank) {
    throw ArgumentError(name, "at most " + std::to_string(Shape::kMaxRank) +
                                  " dimensions, got " + std::to_string(array.ndim()));
  }
  std::vector<int64_t> dims(array.shape(), array.shape() + array.ndim());
  return Shape(dims.data(), dims.size());
}

Input ActivationInput(py::handle object, const char* name) {
  if (object.is_none()) return {};
  bool bf16 = false;
  const py::object converted = AsNumpy(object, &bf16);
  Input input =
      bf16 ? Viewed(py::reinterpret_borrow<py::array>(converted), DType::kBFloat16, name)
           : Viewed(Ensure<float>(converted, object, name), DType::kFloat32, name);
  input.torch = IsTorchTensor(object);
  if (input.torch) input.torch_dtype = object.attr("dtype");
  return input;
}

Input FloatInput(py::handle object, const char* name) {
  if (object.is_none()) return {};
  return Viewed(Ensure<float>(AsNumpy(object), object, name), DType::kFloat32, name);
}

Input MaskInput(py::handle object, const char* name) {
  if (object.is_none()) return {};
  const py::array array = py::array::ensure(AsNumpy(object));
  if (array && array.dtype().is(py::dtype::of<bool>())) {
    return Viewed(Ensure<bool>(array, object, name), DType::kBool, name);
  }
  // PyTorch refuses integer masks: a 0/1 integer mask added as numbers would leave
  // padded keys visible.
  if (array && array.dtype().kind() != 'f') {
    throw ArgumentError(name, "expected a bool or floating-point mask, got dtype " +
                                  std::string(py::str(array.dtype())) +
                                  " (convert with .astype(bool))");
  }
  return FloatInput(object, name);
}

Input IndexInput(py::handle object, const char* name) {
  if (object.is_none()) return {};
  const py::array array = py::array::ensure(AsNumpy(object));
  // Integers only: a float would be truncated, a string parsed, a uint64 above
  // INT64_MAX wrapped to a negative index.
  const char kind = array ? array.dtype().kind() : '?';
  if (kind != 'i' && kind != 'u') {
    throw ArgumentError(name, "expected integers, got " +
                                  (array ? "dtype " + std::string(py::str(array.dtype()))
                                         : std::string("no array")));
  }
  if (kind == 'u' && array.itemsize() == 8) {
    const auto values =
        py::array_t<uint64_t, py::array::c_style | py::array::forcecast>::ensure(array);
    for (py::ssize_t i = 0; i < values.size(); ++i) {
      if (values.data()[i] > static_cast<uint64_t>(INT64_MAX)) {
        throw ArgumentError(name, "expected integers up to 2^63 - 1, got " +
                                      std::to_string(values.data()[i]));
      }
    }
  }
  if (array.dtype().is(py::dtype::of<int32_t>())) {
    return Viewed(Ensure<int32_t>(array, object, name), DType::kInt32, name);
  }
  return Viewed(Ensure<int64_t>(AsNumpy(object), object, name), DType::kInt64, name);
}

Input SwappedFirstAxes(const Input& input, const char* name) {
  const py::module_ numpy = py::module_::import("numpy");
  Input swapped =
      Viewed(numpy.attr("ascontiguousarray")(numpy.attr("swapaxes")(input.array, 0, 1)),
             input.view.dtype, name);
  swapped.torch = input.torch;
  swapped.torch_dtype = input.torch_dtype;
  return swapped;
}

Output NewOutput(const Shape& shape, const Input& like) {
  if (!like.torch) {
    py::array_t<float> array = NewFloats(shape);
    const MutableTensorView view = ViewOf(array);
    return {std::move(array), view, py::object()};
  }
  const DType dtype = like.view.dtype;
  py::object tensor = TorchEmpty(shape, dtype);
  py::array array = TorchWritable(tensor, dtype);
  const bool converted =
      like.torch_dtype && !like.torch_dtype.equal(tensor.attr("dtype"));
  return {std::move(tensor), MutableTensorView(array.mutable_data(), dtype, shape),
          converted ? like.torch_dtype : py::object()};
}

Output CallerOutput(py::handle out, const Shape& shape) {
  const DType dtype = CallerOutputDtype(out);
  py::array array = IsTorchTensor(out) ? TorchWritable(out, dtype)
                                       : py::reinterpret_borrow<py::array>(out);
  const Shape got = ShapeOf(array, "out");
  if (got != shape) {
    throw ArgumentError("out",
                        "expected shape " + shape.ToString() + ", got " + got.ToString());
  }
  return {py::reinterpret_borrow<py::object>(out),
          MutableTensorView(array.mutable_data(), dtype, shape), py::object()};
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
