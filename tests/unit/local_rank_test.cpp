// The launcher's local rank (which GPU a rank takes): read from OpenMPI's, MPICH's or Slurm's
// variable, in that order, ignoring values that are not non-negative integers.
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>

#include "diffract/core/local_rank.hpp"

namespace {

constexpr const char* kVariables[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"};

// Clears the three variables for the test and puts back what the process had.
class LocalRankEnvironment : public ::testing::Test {
protected:
    void SetUp() override {
        for (int i = 0; i < 3; ++i) {
            const char* v = std::getenv(kVariables[i]);
            saved_[i] = v ? std::optional<std::string>(v) : std::nullopt;
            ::unsetenv(kVariables[i]);
        }
    }
    void TearDown() override {
        for (int i = 0; i < 3; ++i) {
            if (saved_[i])
                ::setenv(kVariables[i], saved_[i]->c_str(), 1);
            else
                ::unsetenv(kVariables[i]);
        }
    }
    std::optional<std::string> saved_[3];
};

}  // namespace

TEST_F(LocalRankEnvironment, ZeroOutsideALauncher) { EXPECT_EQ(diffract::local_rank(), 0); }

TEST_F(LocalRankEnvironment, EachLauncherVariableInOrder) {
    ::setenv("SLURM_LOCALID", "5", 1);
    EXPECT_EQ(diffract::local_rank(), 5);
    ::setenv("MPI_LOCALRANKID", "2", 1);
    EXPECT_EQ(diffract::local_rank(), 2);
    ::setenv("OMPI_COMM_WORLD_LOCAL_RANK", "3", 1);
    EXPECT_EQ(diffract::local_rank(), 3);
}

TEST_F(LocalRankEnvironment, MalformedValuesAreIgnored) {
    for (const char* bad : {"", "x1", "1x", "-1", "99999999999999999999"}) {
        ::setenv("OMPI_COMM_WORLD_LOCAL_RANK", bad, 1);
        EXPECT_EQ(diffract::local_rank(), 0) << "'" << bad << "'";
    }
    ::setenv("SLURM_LOCALID", "4", 1);  // the next variable still counts
    EXPECT_EQ(diffract::local_rank(), 4);
}
