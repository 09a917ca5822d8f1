#pragma once
/// \file checkpoint.h
/// Umbrella header of rankwise/checkpoint/: Checkpoints: replicated (torch.save format) and sharded (DCP format), managers, training state.

#include "rankwise/checkpoint/checkpoint.h"
#include "rankwise/checkpoint/lr_scheduler_state.h"
#include "rankwise/checkpoint/manager.h"
#include "rankwise/checkpoint/optimizer_state.h"
#include "rankwise/checkpoint/rng_state.h"
#include "rankwise/checkpoint/safetensors.h"
#include "rankwise/checkpoint/sharded_checkpoint.h"
#include "rankwise/checkpoint/sharded_manager.h"
#include "rankwise/checkpoint/sharded_metadata.h"
#include "rankwise/checkpoint/sharded_tensor.h"
#include "rankwise/checkpoint/state_dict.h"
#include "rankwise/checkpoint/training_state.h"
