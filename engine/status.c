/*
 * status.c - status names and error reports.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "ecg.h"

const char *ecg_status_str(enum ecg_status status)
{
    switch (status) {
    case ECG_OK: return "ok";
    case ECG_ERR_ARG: return "bad_argument";
    case ECG_ERR_NOMEM: return "out_of_memory";
    case ECG_ERR_IO: return "io_error";
    case ECG_ERR_FORMAT: return "bad_input";
    case ECG_ERR_UNSUPPORTED: return "unsupported";
    case ECG_ERR_TOO_LARGE: return "too_large";
    case ECG_ERR_NOT_FOUND: return "not_found";
    case ECG_ERR_MODEL: return "bad_model";
    case ECG_ERR_DEVICE: return "device_error";
    case ECG_ERR_DEVICE_OOM: return "device_out_of_memory";
    case ECG_ERR_BUSY: return "busy";
    case ECG_ERR_INTERNAL: return "internal";
    case ECG_STATUS_COUNT: break;
    }
    return "unknown";
}

enum ecg_status ecg_fail(struct ecg_error *err, enum ecg_status status, const char *code,
                         const char *fmt, ...)
{
    if (!err)
        return status;
    err->status = status;
    snprintf(err->code, sizeof err->code, "%s", code ? code : ecg_status_str(status));
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    return status;
}
