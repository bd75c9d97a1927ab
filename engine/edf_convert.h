/*
 * edf_convert.h - EDF/BDF digital values to millivolts, one definition for the host reader
 * (engine/read_edf.c) and the CUDA backend (gpu/cuda_read.cu), so that both produce the same
 * float for every sample.
 *
 * The arithmetic is EDFlib's (edfread_physical_samples, EDFlib 1.22/1.23): a digital value is
 * clamped into [dig_min, dig_max], then physical = bitvalue * (offset + digital) with
 * bitvalue = (phys_max - phys_min) / (dig_max - dig_min) and offset = phys_max / bitvalue -
 * dig_max, all in double; the reader then multiplies by the unit's scale to mV and rounds to
 * float. On the device every step is an explicitly rounded intrinsic, so no multiply-add is ever
 * fused (the host build has no FMA in its target and ISO C mode contracts nothing).
 *
 * Pure functions, no state: safe from any thread. Included from C and from CUDA (where the
 * functions are __host__ __device__).
 */
#ifndef ECG_EDF_CONVERT_H
#define ECG_EDF_CONVERT_H

#ifdef __CUDACC__
#define EDF_CONVERT_FN static inline __host__ __device__
#else
#define EDF_CONVERT_FN static inline
#endif

/* Physical units per digital step, as EDFlib computes it when it opens a file. */
EDF_CONVERT_FN double edf_bitvalue(double phys_min, double phys_max, int dig_min, int dig_max)
{
    return (phys_max - phys_min) / (dig_max - dig_min);
}

/* The digital offset, as EDFlib computes it when it opens a file. */
EDF_CONVERT_FN double edf_offset(double phys_max, int dig_max, double bitvalue)
{
    return phys_max / bitvalue - dig_max;
}

/* One stored value: little-endian two's complement of bytes_per_sample bytes (2: EDF, 3: BDF),
 * clamped into [dig_min, dig_max] as EDFlib's readers clamp it. */
EDF_CONVERT_FN int edf_digital(const unsigned char *b, int bytes_per_sample, int dig_min,
                               int dig_max)
{
    int v;
    if (bytes_per_sample == 2) {
        v = (int)(short)(unsigned short)(b[0] | b[1] << 8);
    } else {
        unsigned u = (unsigned)b[0] | (unsigned)b[1] << 8 | (unsigned)b[2] << 16;
        v = (int)(u ^ 0x800000u) - 0x800000; /* sign-extend bit 23 */
    }
    return v > dig_max ? dig_max : v < dig_min ? dig_min : v;
}

/* A clamped digital value in mV: (float)(bitvalue * (offset + digital) * scale), each operation
 * rounded to nearest in double, the last to float. May be infinite: the callers refuse that. */
EDF_CONVERT_FN float edf_to_mv(int digital, double bitvalue, double offset, double scale)
{
#ifdef __CUDA_ARCH__
    return __double2float_rn(
        __dmul_rn(__dmul_rn(bitvalue, __dadd_rn(offset, (double)digital)), scale));
#else
    double physical = bitvalue * (offset + (double)digital);
    return (float)(physical * scale);
#endif
}

#endif /* ECG_EDF_CONVERT_H */
