/* strata: topology-aware distributed training. Umbrella header. */
#ifndef STRATA_H
#define STRATA_H

#define STRATA_VERSION_MAJOR 0
#define STRATA_VERSION_MINOR 1
#define STRATA_VERSION_PATCH 0
#define STRATA_VERSION_STRING "0.1.0"

#include "strata/comm.h"
#include "strata/env.h"
#include "strata/parallel.h"
#include "strata/pool.h"
#include "strata/probe.h"
#include "strata/status.h"

#endif
