// evaluate.cu built as C++ against the CPU emulator (emulator.hpp).
#include "gpu/cuda/evaluate.cu"
