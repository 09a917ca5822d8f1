#pragma once
/// \file monitor.h
/// Umbrella header of rankwise/monitor/: Watching a run: the progress bar, step statistics, the metrics log, the job header.

#include "rankwise/monitor/job_header.h"
#include "rankwise/monitor/metrics_log.h"
#include "rankwise/monitor/progress_bar.h"
#include "rankwise/monitor/rank_stats.h"
#include "rankwise/monitor/step_stats.h"
#include "rankwise/monitor/throughput.h"
