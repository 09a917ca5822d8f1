#pragma once
/// \file diag.h
/// Umbrella header of rankwise/diag/: Diagnosing collectives: the flight recorder.

#include "rankwise/diag/flight_recorder.h"
