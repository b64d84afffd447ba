#include "whale/error.h"

const char *whale_strerror(int err)
{
    switch (err) {
    case WHALE_OK:        return "success";
    case WHALE_EINVAL:    return "invalid argument";
    case WHALE_ENOMEM:    return "out of memory";
    case WHALE_EIO:       return "input/output error";
    case WHALE_ECONF:     return "configuration error";
    case WHALE_ERANGE:    return "value out of range";
    case WHALE_ENOENT:    return "not found";
    case WHALE_EPEER:     return "peer rank failed or unreachable";
    case WHALE_ETIMEDOUT: return "timed out";
    case WHALE_ENOTSUP:   return "not supported";
    case WHALE_EPMIX:     return "PMIx error";
    case WHALE_EUCX:      return "UCX error";
    case WHALE_ENCCL:     return "NCCL/CUDA error";
    case WHALE_EDATA:     return "malformed data";
    case WHALE_ESTATE:    return "invalid state";
    case WHALE_ECORRUPT:  return "corrupted data (checksum or size mismatch)";
    case WHALE_ENOSPC:    return "no space left on device";
    case WHALE_ENOFIT:    return "does not fit";
    case WHALE_ECANCELED: return "canceled";
    case WHALE_EOVERFLOW: return "numeric overflow";
    case WHALE_EDONE: return "the step ended (spare released)";
    case WHALE_EMINORITY: return "cut off from the majority of the step";
    case WHALE_ETOOLONG:  return "name too long";
    default:              return "unknown error";
    }
}
