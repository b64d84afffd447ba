/* Error codes shared by every Whale module.
 *
 * Functions return 0 on success or a negative WHALE_E* code; the message a
 * user needs (file:line, rank, option and range) is logged where the error
 * is detected, so callers only propagate the code. */
#ifndef WHALE_ERROR_H
#define WHALE_ERROR_H

#ifdef __cplusplus
extern "C" {
#endif

enum whale_err {
    WHALE_OK        = 0,
    WHALE_EINVAL    = -1,   /* bad argument or value */
    WHALE_ENOMEM    = -2,   /* allocation failed */
    WHALE_EIO       = -3,   /* read/write/system call failed */
    WHALE_ECONF     = -4,   /* configuration file error */
    WHALE_ERANGE    = -5,   /* value out of allowed range */
    WHALE_ENOENT    = -6,   /* file, preset or key not found */
    WHALE_EPEER     = -7,   /* a peer rank died or is unreachable */
    WHALE_ETIMEDOUT = -8,   /* operation did not complete in time */
    WHALE_ENOTSUP   = -9,   /* not supported in this build/configuration */
    WHALE_EPMIX     = -10,  /* PMIx call failed */
    WHALE_EUCX      = -11,  /* UCX call failed */
    WHALE_ENCCL     = -12,  /* NCCL/CUDA call failed */
    WHALE_EDATA     = -13,  /* malformed input data (dataset, plan, checkpoint) */
    WHALE_ESTATE    = -14,  /* called in the wrong state */
    WHALE_ECORRUPT  = -15,  /* checksum mismatch / truncated file */
    WHALE_ENOSPC    = -16,  /* out of disk space */
    WHALE_ENOFIT    = -17,  /* plan does not fit in device memory / topology */
    WHALE_ECANCELED = -18,  /* operation canceled (signal, shutdown) */
    WHALE_EOVERFLOW = -19,  /* numeric overflow (inf/NaN in gradients) */
    WHALE_EDONE     = -20,  /* the step ended normally (a waiting spare is released) */
    WHALE_EMINORITY = -21,  /* this process is cut off from the majority of the step: stop */
    WHALE_ETOOLONG  = -22,  /* a name or string is longer than its limit */
    WHALE_ERR_MIN_  = -23
};

/* Human-readable text for a WHALE_E* code (never NULL). */
const char *whale_strerror(int err);

#ifdef __cplusplus
}
#endif
#endif
