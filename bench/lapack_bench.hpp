// The LAPACK/BLAS routines the benchmarks call: the CPU backend's own, declared once in
// src/linalg/cpu/lapack_impl.hpp, and the drivers only a benchmark measures against them.
#pragma once

#include "linalg/cpu/lapack_impl.hpp"

extern "C" {
void dsyev_2stage_(const char* jobz, const char* uplo, const int* n, double* a, const int* lda, double* w,
                   double* work, const int* lwork, int* info);
void dsyevr_(const char* jobz, const char* range, const char* uplo, const int* n, double* a, const int* lda,
             const double* vl, const double* vu, const int* il, const int* iu, const double* abstol, int* m,
             double* w, double* z, const int* ldz, int* isuppz, double* work, const int* lwork, int* iwork,
             const int* liwork, int* info);
}
