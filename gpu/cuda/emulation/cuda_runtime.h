#pragma once
// The emulated cuda_runtime.h (emulator.hpp): found first on the include path of the emulated build only.
#include "gpu/cuda/emulation/emulator.hpp"
