// numpy arrays and torch tensors as mha tensor views, and the arrays or tensors the
// outputs are written to. Inputs are converted only when their dtype or layout
// requires it; a view is valid while its Input lives. torch is never imported unless
// the caller passes a torch tensor.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include "mha/mha.hpp"

namespace mha::python {

namespace py = pybind11;

struct Input {
  py::array array;     // keeps the viewed memory alive
  TensorView view;     // absent for None
  bool torch = false;  // came from a torch tensor: outputs are torch tensors too
  py::object torch_dtype =
      py::object();  // that tensor's dtype (float16 and float64 are converted)
};

bool IsTorchTensor(py::handle object);

// An activation (query, key, value): a C-contiguous torch tensor of float32 or
// bfloat16, or a C-contiguous float32 numpy array, is viewed in place (a TensorView
// has no strides); anything else is converted to float32. A bf16 tensor is read
// through its int16 bits, as numpy has no bfloat16.
Input ActivationInput(py::handle object, const char* name);
// float32, C-contiguous (weights, sinks, norms; bf16 tensors are converted).
Input FloatInput(py::handle object, const char* name);
// bool kept as bool, floating point as float32 (PyTorch's two mask kinds); other
// dtypes are refused, as PyTorch does.
Input MaskInput(py::handle object, const char* name);
// int32 and int64 kept, other integers as int64.
Input IndexInput(py::handle object, const char* name);
// `input` with its first two axes swapped (PyTorch's [S, B, E] <-> [B, S, E]), copied
// to be C-contiguous, of the same dtype.
Input SwappedFirstAxes(const Input& input, const char* name);

// What a call returns and the view mha writes it through.
struct Output {
  py::object object;
  MutableTensorView view;
  py::object result_dtype =
      py::object();  // set: the written tensor is returned converted to it
  // What the call returns: the written object, converted where result_dtype says.
  py::object Result() const {
    return result_dtype ? object.attr("to")(result_dtype) : object;
  }
};
// A new output for a call whose query is `like`. The one rule of every call: a torch
// query gets a torch tensor of its own dtype (computed in float32 or bfloat16, then
// converted for float16 or float64), anything else a float32 numpy array.
Output NewOutput(const Shape& shape, const Input& like);
// The caller's out=: a C-contiguous, writable torch tensor (float32 or bfloat16) or
// float32 numpy array of exactly `shape`; refused with a ValueError otherwise.
Output CallerOutput(py::handle out, const Shape& shape);

// A new float32 array of that shape (attention weights, logsumexp).
py::array_t<float> NewFloats(const Shape& shape);
MutableTensorView ViewOf(py::array_t<float>& array);

// [first, ..., last] of an array's dimensions, or ValueError past Shape::kMaxRank.
Shape ShapeOf(const py::array& array, const char* name);

}  // namespace mha::python
