// Placeholder: the algorithms are implemented by the limiter-core work (issue 2).
#include "limiter/limiter.h"
