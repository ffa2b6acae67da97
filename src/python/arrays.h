// numpy arrays (or torch tensors, through .numpy()) as mha tensor views, and numpy
// arrays for the outputs. Inputs are converted only when their dtype or layout
// requires it; a view is valid while its Input lives.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include "mha/mha.hpp"

namespace mha::python {

namespace py = pybind11;

struct Input {
  py::array array;  // keeps the viewed memory alive
  TensorView view;  // absent for None
};

// float32, C-contiguous.
Input FloatInput(py::handle object, const char* name);
// bool kept as bool, floating point as float32 (PyTorch's two mask kinds); other
// dtypes are refused, as PyTorch does.
Input MaskInput(py::handle object, const char* name);
// int32 and int64 kept, other integers as int64.
Input IndexInput(py::handle object, const char* name);

// A new float32 array of that shape.
py::array_t<float> NewFloats(const Shape& shape);
MutableTensorView ViewOf(py::array_t<float>& array);

// [first, ..., last] of an array's dimensions, or ValueError past Shape::kMaxRank.
Shape ShapeOf(const py::array& array, const char* name);

}  // namespace mha::python
