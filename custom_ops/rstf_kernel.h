// Helpers shared by every generated rstf TensorFlow op wrapper.
//
// The generated C is specialised to exact shapes and dtypes, so every call checks its
// inputs first: a mismatch becomes an InvalidArgument status naming the node and the input,
// never a crash or an out-of-bounds read.
#ifndef RSTF_KERNEL_H_
#define RSTF_KERNEL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/framework/tensor_shape.h"

namespace rstf {

inline tensorflow::TensorShape Shape(const std::vector<int64_t>& dims) {
  tensorflow::TensorShape s;
  for (int64_t d : dims) s.AddDim(d);
  return s;
}

// False (with the context's status set) unless input `i` has exactly `dtype` and `dims`.
inline bool CheckInput(tensorflow::OpKernelContext* ctx, int i, tensorflow::DataType dtype,
                       const std::vector<int64_t>& dims, const char* tensor) {
  const tensorflow::Tensor& t = ctx->input(i);
  if (t.dtype() != dtype) {
    ctx->CtxFailure(tensorflow::errors::InvalidArgument(
        "rstf op '", ctx->op_kernel().name(), "': input ", i, " ('", tensor, "') has dtype ",
        tensorflow::DataTypeString(t.dtype()), ", expected ",
        tensorflow::DataTypeString(dtype)));
    return false;
  }
  const tensorflow::TensorShape expected = Shape(dims);
  if (t.shape() != expected) {
    ctx->CtxFailure(tensorflow::errors::InvalidArgument(
        "rstf op '", ctx->op_kernel().name(), "': input ", i, " ('", tensor, "') has shape ",
        t.shape().DebugString(), ", expected ", expected.DebugString(),
        " (the op was generated for these exact shapes)"));
    return false;
  }
  return true;
}

inline tensorflow::shape_inference::ShapeHandle MakeShape(
    tensorflow::shape_inference::InferenceContext* c, const std::vector<int64_t>& dims) {
  std::vector<tensorflow::shape_inference::DimensionHandle> d;
  for (int64_t x : dims) d.push_back(c->MakeDim(x));
  return c->MakeShape(d);
}

// Graph-construction-time check: input `i` must be compatible with `dims`.
inline absl::Status MergeInput(tensorflow::shape_inference::InferenceContext* c, int i,
                               const std::vector<int64_t>& dims) {
  tensorflow::shape_inference::ShapeHandle merged;
  return c->Merge(c->input(i), MakeShape(c, dims), &merged);
}

}  // namespace rstf

#endif  // RSTF_KERNEL_H_
