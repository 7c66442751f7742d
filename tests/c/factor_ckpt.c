/* The factoring program with a safe point every round (see factor.c). */
#define FACTOR_CKPT 1
#include "factor.c"
