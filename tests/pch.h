// Precompiled header of the test binary: LibTorch and Catch2.
#pragma once
#include <torch/torch.h>
#include <catch2/catch.hpp>
