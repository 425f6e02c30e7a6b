// Every file of every fuzz corpus (tests/fuzz/corpus/<target>/) replayed through the same body the
// libFuzzer harness runs (tests/fuzz/targets_impl.hpp): the parser returns or throws InputError,
// and what it accepts keeps its invariants. A crash or a sanitizer report (in the ASan build) fails
// the test as well. Inputs the fuzzer finds are added to the corpus and so become regression tests.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "../fuzz/targets_impl.hpp"

namespace fs = std::filesystem;

namespace {

std::vector<std::byte> read_bytes(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    const std::vector<char> text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::vector<std::byte> out(text.size());
    for (std::size_t i = 0; i < text.size(); ++i) out[i] = static_cast<std::byte>(text[i]);
    return out;
}

class FuzzCorpus : public testing::TestWithParam<diffract::fuzz::Target> {};

TEST_P(FuzzCorpus, EveryFileReturnsOrThrowsInputErrorOnly) {
    const auto& target = GetParam();
    const fs::path dir = fs::path(DIFFRACT_FUZZ_CORPUS) / target.name;
    ASSERT_TRUE(fs::is_directory(dir)) << dir << ": every fuzz target needs a seed corpus";
    std::size_t files = 0;
    for (const auto& e : fs::recursive_directory_iterator(dir)) {
        if (!e.is_regular_file()) continue;
        ++files;
        const auto bytes = read_bytes(e.path());
        try {
            target.run(bytes);
        } catch (const std::exception& ex) {
            ADD_FAILURE() << e.path() << ": " << ex.what();
        }
    }
    EXPECT_GT(files, 0u) << dir;
}

INSTANTIATE_TEST_SUITE_P(AllTargets, FuzzCorpus, testing::ValuesIn(diffract::fuzz::kTargets),
                         [](const testing::TestParamInfo<diffract::fuzz::Target>& p) {
                             return std::string(p.param.name);
                         });

// The targets' own checks can fail: a Finding is not swallowed like an InputError.
TEST(FuzzTargets, InvariantViolationsEscape) {
    EXPECT_THROW(diffract::fuzz::expect(false, "broken"), diffract::fuzz::Finding);
    const std::string ok = "layer,head\n0,1\n";
    EXPECT_NO_THROW(diffract::fuzz::heads_csv({reinterpret_cast<const std::byte*>(ok.data()), ok.size()}));
}

}  // namespace
