/* clock.h - time for measurements. */
#ifndef NTX_CLOCK_H
#define NTX_CLOCK_H

/* Seconds on the monotonic clock (CLOCK_MONOTONIC): only differences mean
 * anything. Thread-safe. */
double ntx_now_s(void);

#endif
