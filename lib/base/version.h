/* version.h - the suite's one version: every tool's -V prints
 * "PROG (ntx) " NTX_VERSION. */
#ifndef NTX_VERSION_H
#define NTX_VERSION_H

#define NTX_VERSION "0.5.0"

#endif
