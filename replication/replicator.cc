#include "replication/replicator.h"
