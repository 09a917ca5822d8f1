#pragma once
/// \file rankwise.h
/// Umbrella include: everything a data-parallel training program needs. Each
/// folder of include/rankwise/ has its own umbrella beside it (dist.h,
/// parallel.h, checkpoint.h, ...); rankwise/fabric/cli.h (CLI11) is separate.

#include "rankwise/amp.h"
#include "rankwise/checkpoint.h"
#include "rankwise/data.h"
#include "rankwise/device.h"
#include "rankwise/diag.h"
#include "rankwise/dist.h"
#include "rankwise/env.h"
#include "rankwise/error.h"
#include "rankwise/fabric.h"
#include "rankwise/log.h"
#include "rankwise/metrics.h"
#include "rankwise/monitor.h"
#include "rankwise/parallel.h"
#include "rankwise/run_main.h"
#include "rankwise/seed.h"
