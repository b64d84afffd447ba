/* SIGBUS-safe copies out of memory-mapped files (guard.c). */
#ifndef WHALE_DATA_GUARD_H
#define WHALE_DATA_GUARD_H

/* Runs fn(arg); returns 0, or 1 when fn touched a page of a mapped file
 * past its end (the file shrank), -1 if the handler cannot be installed. */
int data_guard_run(void (*fn)(void *), void *arg);

#endif
