// Precompiled header: the LibTorch C++ API, compiled once per build.
#pragma once
#include <torch/torch.h>
