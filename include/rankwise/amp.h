#pragma once
/// \file amp.h
/// Umbrella header of rankwise/amp/: Mixed precision: GradScaler, dynamic loss scaling for float16 (like torch.amp).

#include "rankwise/amp/grad_scaler.h"
