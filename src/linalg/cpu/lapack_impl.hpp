// The LAPACK/BLAS routines the CPU backend uses, declared once (Fortran ABI, column-major,
// every argument by pointer). Callers label positional arguments and check `info`.
#pragma once

#include <cstdint>
#include <limits>
#include <stdexcept>

#include <fmt/format.h>

#include "../checked_int_impl.hpp"

extern "C" {
void sgesdd_(const char* jobz, const int* m, const int* n, float* a, const int* lda, float* s, float* u,
             const int* ldu, float* vt, const int* ldvt, float* work, const int* lwork, int* iwork,
             int* info);
void dgesdd_(const char* jobz, const int* m, const int* n, double* a, const int* lda, double* s, double* u,
             const int* ldu, double* vt, const int* ldvt, double* work, const int* lwork, int* iwork,
             int* info);
void dsyevd_(const char* jobz, const char* uplo, const int* n, double* a, const int* lda, double* w,
             double* work, const int* lwork, int* iwork, const int* liwork, int* info);
void dsyevr_(const char* jobz, const char* range, const char* uplo, const int* n, double* a, const int* lda,
             const double* vl, const double* vu, const int* il, const int* iu, const double* abstol, int* m,
             double* w, double* z, const int* ldz, int* isuppz, double* work, const int* lwork, int* iwork,
             const int* liwork, int* info);
void dsyevd_2stage_(const char* jobz, const char* uplo, const int* n, double* a, const int* lda, double* w,
                    double* work, const int* lwork, int* iwork, const int* liwork, int* info);
void ssyevd_(const char* jobz, const char* uplo, const int* n, float* a, const int* lda, float* w,
             float* work, const int* lwork, int* iwork, const int* liwork, int* info);
void ssyevd_2stage_(const char* jobz, const char* uplo, const int* n, float* a, const int* lda, float* w,
                    float* work, const int* lwork, int* iwork, const int* liwork, int* info);
void dsyrk_(const char* uplo, const char* trans, const int* n, const int* k, const double* alpha,
            const double* a, const int* lda, const double* beta, double* c, const int* ldc);
void dgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k,
            const double* alpha, const double* a, const int* lda, const double* b, const int* ldb,
            const double* beta, double* c, const int* ldc);
void ssyrk_(const char* uplo, const char* trans, const int* n, const int* k, const float* alpha,
            const float* a, const int* lda, const float* beta, float* c, const int* ldc);
void sgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k,
            const float* alpha, const float* a, const int* lda, const float* b, const int* ldb,
            const float* beta, float* c, const int* ldc);
void dgeqrf_(const int* m, const int* n, double* a, const int* lda, double* tau, double* work,
             const int* lwork, int* info);
void dgelqf_(const int* m, const int* n, double* a, const int* lda, double* tau, double* work,
             const int* lwork, int* info);
void dorgqr_(const int* m, const int* n, const int* k, double* a, const int* lda, const double* tau,
             double* work, const int* lwork, int* info);
void dtrsm_(const char* side, const char* uplo, const char* transa, const char* diag, const int* m,
            const int* n, const double* alpha, const double* a, const int* lda, double* b, const int* ldb);
void dtrmm_(const char* side, const char* uplo, const char* transa, const char* diag, const int* m,
            const int* n, const double* alpha, const double* a, const int* lda, double* b, const int* ldb);
void openblas_set_num_threads(int n);
char* openblas_get_config(void);
char* openblas_get_corename(void);
}

namespace diffract::linalg::lapack {

using linalg::checked_int;

inline void gesdd(const char* jobz, const int* m, const int* n, float* a, const int* lda, float* s, float* u,
                  const int* ldu, float* vt, const int* ldvt, float* work, const int* lwork, int* iwork,
                  int* info) {
    sgesdd_(jobz, m, n, a, lda, s, u, ldu, vt, ldvt, work, lwork, iwork, info);
}
inline void gesdd(const char* jobz, const int* m, const int* n, double* a, const int* lda, double* s,
                  double* u, const int* ldu, double* vt, const int* ldvt, double* work, const int* lwork,
                  int* iwork, int* info) {
    dgesdd_(jobz, m, n, a, lda, s, u, ldu, vt, ldvt, work, lwork, iwork, info);
}

inline void syrk(const char* uplo, const char* trans, const int* n, const int* k, const float* alpha,
                 const float* a, const int* lda, const float* beta, float* c, const int* ldc) {
    ssyrk_(uplo, trans, n, k, alpha, a, lda, beta, c, ldc);
}
inline void syrk(const char* uplo, const char* trans, const int* n, const int* k, const double* alpha,
                 const double* a, const int* lda, const double* beta, double* c, const int* ldc) {
    dsyrk_(uplo, trans, n, k, alpha, a, lda, beta, c, ldc);
}
inline void gemm(const char* transa, const char* transb, const int* m, const int* n, const int* k,
                 const float* alpha, const float* a, const int* lda, const float* b, const int* ldb,
                 const float* beta, float* c, const int* ldc) {
    sgemm_(transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
inline void gemm(const char* transa, const char* transb, const int* m, const int* n, const int* k,
                 const double* alpha, const double* a, const int* lda, const double* b, const int* ldb,
                 const double* beta, double* c, const int* ldc) {
    dgemm_(transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace diffract::linalg::lapack
