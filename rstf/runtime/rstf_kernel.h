// Helpers shared by every generated rstf TensorFlow op wrapper.
//
// The generated C is specialised to exact shapes and dtypes, so every call checks its
// inputs first: a mismatch becomes an InvalidArgument status naming the node and the input,
// never a crash or an out-of-bounds read.
#ifndef RSTF_KERNEL_H_
#define RSTF_KERNEL_H_

#include <pthread.h>
#include <sys/mman.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <functional>
#include <initializer_list>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/framework/tensor_shape.h"

#ifdef RSTF_TEAM
// The op library's own OpenMP team (rstf/runtime/rstf_team.c, hidden in the library).
extern "C" {
void rstf_team_lock(void);
void rstf_team_unlock(void);
}
#endif

namespace rstf {
// Everything here has internal linkage: each op library keeps its own runtime. Exported, a
// helper of one library (OmpMaster::Get's master above all, a GNU-unique symbol) would bind
// to the first loaded library's, whatever rstf version built that one.
namespace {

// `dims` as text, as TensorShape::DebugString writes a shape: "[2,3]". For messages about a
// shape that may not be a valid TensorShape (its element count overflowing int64, from a
// huge dynamic batch), which building one would abort the process on.
inline std::string DimsString(std::initializer_list<int64_t> dims) {
  std::string s = "[";
  for (const int64_t* d = dims.begin(); d != dims.end(); ++d)
    absl::StrAppend(&s, d == dims.begin() ? "" : ",", *d);
  return s + "]";
}

// Allocates output `i` of the call with shape `dims`. Dims whose element count overflows
// int64 (a dynamic batch N of 2^62 samples, 0 elements each in and 4 each out) are the op's
// InvalidArgument error, not the abort of TensorShape::AddDim's CHECK.
inline absl::Status AllocateOutput(tensorflow::OpKernelContext* ctx, int i,
                                   std::initializer_list<int64_t> dims,
                                   tensorflow::Tensor** out) {
  tensorflow::TensorShape shape;
  const absl::Status s = tensorflow::TensorShape::BuildTensorShape(dims, &shape);
  if (!s.ok()) {
    return tensorflow::errors::InvalidArgument("rstf op '", ctx->op_kernel().name(),
                                               "': output ", i, " would have shape ",
                                               DimsString(dims), ": ", s.message());
  }
  return ctx->allocate_output(i, shape, out);
}

// The workspace of a dynamic-batch call: one slice of `bytes` for each of `threads` threads
// (the version that distributes the batch loop gives each thread its own temporaries).
inline absl::Status AllocateWorkspace(tensorflow::OpKernelContext* ctx, int64_t bytes,
                                      int threads, tensorflow::Tensor* ws) {
  int64_t total;
  tensorflow::TensorShape shape;
  if (threads < 1 || __builtin_mul_overflow(bytes, int64_t{threads}, &total) ||
      !tensorflow::TensorShape::BuildTensorShape({total}, &shape).ok()) {
    return tensorflow::errors::InvalidArgument("rstf op '", ctx->op_kernel().name(),
                                               "': no workspace of ", bytes, " bytes for each of ",
                                               threads, " threads");
  }
  return ctx->allocate_temp(tensorflow::DT_INT8, shape, ws);
}

// OK unless `t` (what = "input 3", say, or "weight 0") has exactly `dtype` and `dims`.
// The match allocates nothing; the message writes the expected dims as text (DimsString).
inline absl::Status CheckTensor(const tensorflow::Tensor& t, const std::string& op,
                                const char* what, const char* tensor,
                                tensorflow::DataType dtype,
                                std::initializer_list<int64_t> dims) {
  if (t.dtype() != dtype) {
    return tensorflow::errors::InvalidArgument(
        "rstf op '", op, "': ", what, " ('", tensor, "') has dtype ",
        tensorflow::DataTypeString(t.dtype()), ", expected ",
        tensorflow::DataTypeString(dtype));
  }
  bool same = t.dims() == static_cast<int>(dims.size());
  for (int k = 0; same && k < t.dims(); ++k) same = t.dim_size(k) == dims.begin()[k];
  if (!same) {
    return tensorflow::errors::InvalidArgument(
        "rstf op '", op, "': ", what, " ('", tensor, "') has shape ",
        t.shape().DebugString(), ", expected ", DimsString(dims),
        " (the op was generated for these exact shapes)");
  }
  return absl::OkStatus();
}

// False (with the context's status set) unless input `i` has exactly `dtype` and `dims`.
// Every call checks every input; the weights are attributes, checked once (LoadWeight).
inline bool CheckInput(tensorflow::OpKernelContext* ctx, int i, tensorflow::DataType dtype,
                       std::initializer_list<int64_t> dims, const char* tensor) {
  const tensorflow::Tensor& t = ctx->input(i);
  if (t.dtype() == dtype && t.dims() == static_cast<int>(dims.size())) {
    bool same = true;  // (the common case, without building the message's strings)
    for (int k = 0; same && k < t.dims(); ++k) same = t.dim_size(k) == dims.begin()[k];
    if (same) return true;
  }
  ctx->CtxFailure(CheckTensor(t, ctx->op_kernel().name(), absl::StrCat("input ", i).c_str(),
                              tensor, dtype, dims));
  return false;
}

// A frozen weight of the op: its tensor attribute `attr` (the spliced graph stores the
// value in the node, as a Const node stores its own), read and checked once, when
// TensorFlow builds the kernel. Why not a Const input: each Const is a node TensorFlow's
// executor runs on every call, and each input a check; with MobileNet v2's 107 weights,
// after kernels that evicted the caches, that cost 5-15 us a call (measured with a
// stand-in op, 1 against 107 inputs: checks 1 against 6-8 us, TensorFlow's gap between
// calls 32-56 against 37-62 us, medians of 400 calls, 10 rounds).
inline absl::Status LoadWeight(tensorflow::OpKernelConstruction* c, const char* attr,
                               tensorflow::Tensor* t, const char* tensor,
                               tensorflow::DataType dtype,
                               std::initializer_list<int64_t> dims) {
  TF_RETURN_IF_ERROR(c->GetAttr(attr, t));
  return CheckTensor(*t, c->def().name(), (std::string("weight ") + attr).c_str(), tensor,
                     dtype, dims);
}

// Memory on 2 MB pages: an anonymous mapping aligned to 2 MB with transparent huge pages
// asked for (madvise; where the system refuses, 4 KB pages and nothing else changes),
// zero-filled here so that its page faults are taken once, when the kernel is built.
//
// Why: a call streams every weight and the whole workspace once. MobileNet v2's are 14.5
// and 2.7 MB: about 4,300 pages of 4 KB, more than a Zen 4 core's 3,072 L2 TLB entries,
// so each call walks the page tables again for most of them (nested tables in a VM); on
// 2 MB pages they are 10. Measured on its kernels (Zen 4 VM, 2 threads, the same buffers
// on 4 KB or 2 MB pages, 400 alternating calls, 4 runs): 0.980-0.998 the time.
class HugeBuffer {
 public:
  HugeBuffer() = default;
  HugeBuffer(const HugeBuffer&) = delete;
  HugeBuffer& operator=(const HugeBuffer&) = delete;
  ~HugeBuffer() {
    if (base_ != nullptr) munmap(base_, mapped_);
  }

  absl::Status Allocate(size_t bytes) {
    if (bytes == 0) return absl::OkStatus();
    constexpr size_t kPage = size_t{2} << 20;
    const size_t size = (bytes + kPage - 1) / kPage * kPage;
    void* p = mmap(nullptr, size + kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
    if (p == MAP_FAILED) {
      return tensorflow::errors::ResourceExhausted("rstf: cannot map ", size + kPage,
                                                   " bytes for weights or workspace");
    }
    base_ = p;
    mapped_ = size + kPage;
    data_ = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(p) + kPage - 1) & ~(kPage - 1));
    madvise(data_, size, MADV_HUGEPAGE);  // advice: refused, it stays on 4 KB pages
    std::memset(data_, 0, bytes);
    return absl::OkStatus();
  }

  char* data() const { return data_; }

 private:
  void* base_ = nullptr;
  size_t mapped_ = 0;
  char* data_ = nullptr;
};

// A kernel's frozen weights, copied out of their attribute tensors (LoadWeight) into one
// HugeBuffer, in input order (the order the kernels read them), each at a 64-byte boundary.
class Weights {
 public:
  absl::Status Pack(const std::vector<tensorflow::Tensor>& tensors) {
    size_t total = 0;
    for (const tensorflow::Tensor& t : tensors) {
      offsets_.push_back(total);
      total += (t.TotalBytes() + 63) / 64 * 64;
    }
    TF_RETURN_IF_ERROR(buffer_.Allocate(total));
    for (size_t k = 0; k < tensors.size(); ++k) {
      const auto bytes = tensors[k].tensor_data();
      std::memcpy(buffer_.data() + offsets_[k], bytes.data(), bytes.size());
    }
    return absl::OkStatus();
  }

  template <typename T>
  const T* at(size_t k) const {
    return reinterpret_cast<const T*>(buffer_.data() + offsets_[k]);
  }

 private:
  std::vector<size_t> offsets_;
  HugeBuffer buffer_;
};

// A shape of known dims (a -1 is unknown).
inline tensorflow::shape_inference::ShapeHandle MakeShape(
    tensorflow::shape_inference::InferenceContext* c, const std::vector<int64_t>& dims) {
  std::vector<tensorflow::shape_inference::DimensionHandle> d;
  for (int64_t x : dims) d.push_back(c->MakeDim(x));
  return c->MakeShape(d);
}

// The same with dimension 0 the dynamic batch `batch`.
inline tensorflow::shape_inference::ShapeHandle MakeShape(
    tensorflow::shape_inference::InferenceContext* c, const std::vector<int64_t>& dims,
    tensorflow::shape_inference::DimensionHandle batch) {
  std::vector<tensorflow::shape_inference::DimensionHandle> d{batch};
  for (size_t i = 1; i < dims.size(); ++i) d.push_back(c->MakeDim(dims[i]));
  return c->MakeShape(d);
}

// The dynamic batch of a call: dimension 0 of input `i`, or -1 (status set) when that input
// has rank 0. The per-input checks then compare every batched input against it.
inline int64_t BatchOf(tensorflow::OpKernelContext* ctx, int i) {
  const tensorflow::Tensor& t = ctx->input(i);
  if (t.dims() < 1) {
    ctx->CtxFailure(tensorflow::errors::InvalidArgument(
        "rstf op '", ctx->op_kernel().name(), "': input ", i, " has rank 0, expected a batch"));
    return -1;
  }
  return t.dim_size(0);
}

// Graph-construction-time check: input `i` must be compatible with `dims`.
inline absl::Status MergeInput(tensorflow::shape_inference::InferenceContext* c, int i,
                               const std::vector<int64_t>& dims) {
  tensorflow::shape_inference::ShapeHandle merged;
  return c->Merge(c->input(i), MakeShape(c, dims), &merged);
}

// Per-call timestamps, compiled in only with RSTF_CALL_TIMES defined (the builds of
// benchmarks/call_breakdown.py): RSTF_MARK(k) records phase k of the current call, 0 when
// Compute starts, 1 before the hand-off, 2 when the kernels start (on the master thread
// without RSTF_TEAM), 3 when they end, 4 when Compute returns. At exit the calls go, one
// line each, to the file named by the environment variable RSTF_CALL_TIMES_OUT. For calls
// made one after the other.
#ifdef RSTF_CALL_TIMES
class CallTimes {
 public:
  static void Mark(int phase) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    const double us = t.tv_sec * 1e6 + t.tv_nsec * 1e-3;
    static int registered = std::atexit(&Dump);
    (void)registered;
    if (phase == 0 && n_ < kCalls) ++n_;
    if (n_ > 0 && n_ <= kCalls) times_[n_ - 1][phase] = us;
  }

 private:
  static constexpr int kCalls = 100000;
  static void Dump() {
    const char* path = std::getenv("RSTF_CALL_TIMES_OUT");
    FILE* f = path != nullptr ? std::fopen(path, "w") : nullptr;
    if (f == nullptr) return;
    for (int i = 0; i < n_; ++i)
      std::fprintf(f, "%.3f %.3f %.3f %.3f %.3f\n", times_[i][0], times_[i][1], times_[i][2],
                   times_[i][3], times_[i][4]);
    std::fclose(f);
  }
  static inline int n_ = 0;
  static inline double times_[kCalls][5];
};
#define RSTF_MARK(k) ::rstf::CallTimes::Mark(k)
#else
#define RSTF_MARK(k) ((void)0)
#endif

#ifdef RSTF_TEAM
// The op library carries its own OpenMP team (rstf/runtime/rstf_team.c, compiled in with
// RSTF_TEAM defined): the calling thread is the team's thread 0, whichever TensorFlow thread
// it is, and the library's worker threads are the others. The lock serialises calls, so
// there is one team at a time; each call already uses all the threads it is given.
//
// Runs fn (the generated C of one call) on the calling thread, as the team's thread 0.
template <typename Fn>
void RunKernels(Fn&& fn) {
  struct Lock {
    Lock() { rstf_team_lock(); }
    ~Lock() { rstf_team_unlock(); }
  } lock;
  fn();
}
#else
// Without RSTF_TEAM (the serving package, and code from --optimizer graphite or polly, whose
// parallel loops call libgomp): every call of this library's generated C runs on one
// dedicated thread, so that all its OpenMP parallel regions start from the same thread.
//
// Why: libgomp keeps one worker pool per thread that starts a parallel region, and
// TensorFlow runs ops on whichever inter-op thread is free. With a pool per such thread,
// libgomp manages more threads than there are cores, throttles its spin-waiting to a few
// hundred iterations, and every region start and end becomes a futex sleep and wake-up.
// Measured on Inception v3 (2 cores, ~300 regions a run): 125-131 ms a run with calls
// from TF's threads, 58-60 ms with one starting thread. Concurrent calls are serialised;
// each already uses all the threads it is given.
//
// fork(): only the forking thread exists in the child, not the master thread, and another
// thread may have been inside Run (holding mu_, or waiting for its job) when it forked. So
// the child's next Get() makes a new master; the parent's object is left as it is (leaked),
// never touched: its mutex may be locked for good.
class OmpMaster {
 public:
  static OmpMaster& Get() {
    OmpMaster* master = current_.load(std::memory_order_acquire);
    if (master != nullptr) return *master;
    pthread_mutex_lock(&make_mu_);
    master = current_.load(std::memory_order_relaxed);
    if (master == nullptr) {
      master = new OmpMaster();  // never destroyed: the thread outlives exit
      current_.store(master, std::memory_order_release);
    }
    pthread_mutex_unlock(&make_mu_);
    return *master;
  }

  // pthread_atfork's child handler (registered when the library is loaded).
  static void AfterForkChild() {
    current_.store(nullptr, std::memory_order_relaxed);
    pthread_mutex_init(&make_mu_, nullptr);  // (a thread that was making one is not here)
  }

  // Runs fn on the master thread and waits for it.
  void Run(const std::function<void()>& fn) {
    Job job{&fn};
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(&job);
    }
    cv_.notify_one();
    std::unique_lock<std::mutex> lock(job.mu);
    job.cv.wait(lock, [&job] { return job.done; });
  }

 private:
  struct Job {
    const std::function<void()>* fn;
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
  };

  OmpMaster() { std::thread([this] { Loop(); }).detach(); }

  void Loop() {
    for (;;) {
      Job* job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return !queue_.empty(); });
        job = queue_.front();
        queue_.pop_front();
      }
      (*job->fn)();
      {
        std::lock_guard<std::mutex> lock(job->mu);
        job->done = true;
      }
      job->cv.notify_one();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job*> queue_;

  static std::atomic<OmpMaster*> current_;  // this library's master; null until the first call
  static pthread_mutex_t make_mu_;          // making it
};
std::atomic<OmpMaster*> OmpMaster::current_{nullptr};
pthread_mutex_t OmpMaster::make_mu_ = PTHREAD_MUTEX_INITIALIZER;

// At load, not at the first call: a child forked while another thread makes the master
// would wait for make_mu_ forever.
const int kOmpMasterForkHandler = pthread_atfork(nullptr, nullptr, &OmpMaster::AfterForkChild);

// Runs fn (the generated C of one call) on the library's OpenMP master thread.
inline void RunKernels(const std::function<void()>& fn) { OmpMaster::Get().Run(fn); }
#endif  // RSTF_TEAM

}  // namespace
}  // namespace rstf

#endif  // RSTF_KERNEL_H_
