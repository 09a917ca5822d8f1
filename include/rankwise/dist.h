#pragma once
/// \file dist.h
/// Umbrella header of rankwise/dist/: Process groups and collectives (like torch.distributed), agreement across ranks.

#include "rankwise/dist/consensus.h"
#include "rankwise/dist/process_group.h"
