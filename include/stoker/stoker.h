/* libstoker: everything in one include. */
#ifndef STOKER_H
#define STOKER_H

#include "stoker/bench.h"
#include "stoker/cache.h"
#include "stoker/ckpt.h"
#include "stoker/doctor.h"
#include "stoker/error.h"
#include "stoker/format.h"
#include "stoker/gen.h"
#include "stoker/loader.h"
#include "stoker/publication.h"
#include "stoker/tokens.h"
#include "stoker/util.h"
#include "stoker/watch.h"
#include "stoker/workload.h"

#endif
