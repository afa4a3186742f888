#pragma once
// The two entry points of the CUDA recomputation backend (gpu/cuda_recompute.cpp and cuda_recompute_pass.cpp),
// compiled only when TIERLAB_HAVE_CUDA is defined. recompute.cpp reaches the CUDA
// backend through these alone; the backend computes what gpu/recompute.hpp states.
#include <memory>
#include <string>

#include "gpu/recompute.hpp"

namespace tierlab {

// Is a usable CUDA device present? When not, *reason (if given) gets one sentence why.
bool cuda_device_present(std::string* reason);

// Makes device (hint mod count) current for the calling thread; "" or one sentence why not.
std::string select_cuda_device(int hint, int* device, int* count);

// The CUDA Recomputer, or nullptr with one sentence in *reason (if given) saying why.
std::unique_ptr<Recomputer> make_cuda_recomputer(std::string* reason);

}  // namespace tierlab
