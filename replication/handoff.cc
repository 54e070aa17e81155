#include "replication/handoff.h"
