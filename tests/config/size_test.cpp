// parse_size, size_spec::resolve and size_spec::to_string.

#include <cstdint>
#include <limits>
#include <optional>
#include <string>

#include <gtest/gtest.h>

#include "asyncshim/config/settings.hpp"
#include "byte_literals.hpp"

namespace {

using asyncshim::config::parse_size;
using asyncshim::config::size_spec;

using byte_literals::GiB;
using byte_literals::KiB;
using byte_literals::MiB;
using byte_literals::TiB;

size_spec bytes(std::uint64_t n) { return size_spec{size_spec::kind::bytes, n, 0.0}; }
size_spec percent(double p) { return size_spec{size_spec::kind::percent_of_total, 0, p}; }

struct accepted_case {
  char const* text;
  size_spec expected;
};

class AcceptedSize : public ::testing::TestWithParam<accepted_case> {};

TEST_P(AcceptedSize, ParsesToExpectedValue)
{
  auto const& [text, expected] = GetParam();
  auto const parsed = parse_size(text);
  ASSERT_TRUE(parsed.has_value()) << "'" << text << "' was rejected";
  EXPECT_EQ(*parsed, expected) << "'" << text << "' parsed as " << parsed->to_string();
}

INSTANTIATE_TEST_SUITE_P(PlainBytes, AcceptedSize,
                         ::testing::Values(accepted_case{"0", bytes(0)}, accepted_case{"1", bytes(1)},
                                           accepted_case{"1048576", bytes(MiB)}, accepted_case{"000123", bytes(123)},
                                           accepted_case{"18446744073709551615",
                                                         bytes(std::numeric_limits<std::uint64_t>::max())},
                                           accepted_case{"0B", bytes(0)}, accepted_case{"1000B", bytes(1000)},
                                           accepted_case{"1000b", bytes(1000)}, accepted_case{"1000 B", bytes(1000)}));

INSTANTIATE_TEST_SUITE_P(EveryUnitAndSpelling, AcceptedSize,
                         ::testing::Values(accepted_case{"1K", bytes(KiB)}, accepted_case{"1k", bytes(KiB)},
                                           accepted_case{"1KiB", bytes(KiB)}, accepted_case{"1kib", bytes(KiB)},
                                           accepted_case{"1KIB", bytes(KiB)}, accepted_case{"1M", bytes(MiB)},
                                           accepted_case{"1m", bytes(MiB)}, accepted_case{"1MiB", bytes(MiB)},
                                           accepted_case{"1mib", bytes(MiB)}, accepted_case{"4G", bytes(4 * GiB)},
                                           accepted_case{"4g", bytes(4 * GiB)}, accepted_case{"4GiB", bytes(4 * GiB)},
                                           accepted_case{"4gIb", bytes(4 * GiB)}, accepted_case{"2T", bytes(2 * TiB)},
                                           accepted_case{"2t", bytes(2 * TiB)}, accepted_case{"2TiB", bytes(2 * TiB)},
                                           accepted_case{"2tib", bytes(2 * TiB)}, accepted_case{"0GiB", bytes(0)},
                                           accepted_case{"16777215TiB", bytes(16777215 * TiB)}));

INSTANTIATE_TEST_SUITE_P(SpacesAndWhitespace, AcceptedSize,
                         ::testing::Values(accepted_case{"4 GiB", bytes(4 * GiB)},
                                           accepted_case{"4   GiB", bytes(4 * GiB)},
                                           accepted_case{"4\tGiB", bytes(4 * GiB)},
                                           accepted_case{"  4GiB", bytes(4 * GiB)},
                                           accepted_case{"4GiB  ", bytes(4 * GiB)},
                                           accepted_case{"\t 4 GiB \n", bytes(4 * GiB)}, accepted_case{" 0 ", bytes(0)},
                                           accepted_case{" 25% ", percent(25)}, accepted_case{"25 %", percent(25)}));

INSTANTIATE_TEST_SUITE_P(FractionsRoundDown, AcceptedSize,
                         ::testing::Values(accepted_case{"1.5GiB", bytes(GiB + GiB / 2)},
                                           accepted_case{"1.5G", bytes(GiB + GiB / 2)},
                                           accepted_case{"1.5 g", bytes(GiB + GiB / 2)},
                                           accepted_case{"0.5K", bytes(512)},
                                           accepted_case{"0.1K", bytes(102)},       // 102.4
                                           accepted_case{"1.999KiB", bytes(2046)},  // 2046.976
                                           accepted_case{"0.0001K", bytes(0)},      // 0.1024
                                           accepted_case{"2.25MiB", bytes(2 * MiB + MiB / 4)},
                                           accepted_case{"0.3T", bytes(329853488332)},  // 329853488332.8
                                           accepted_case{"1.00000000000000000000000001K", bytes(KiB)},
                                           accepted_case{"1.99999999999999999999999999K", bytes(2047)}));

INSTANTIATE_TEST_SUITE_P(Percentages, AcceptedSize,
                         ::testing::Values(accepted_case{"25%", percent(25)}, accepted_case{"0%", percent(0)},
                                           accepted_case{"100%", percent(100)}, accepted_case{"100.000%", percent(100)},
                                           accepted_case{"12.5%", percent(12.5)},
                                           accepted_case{"0.001%", percent(0.001)},
                                           accepted_case{"033.3%", percent(33.3)},
                                           accepted_case{"99.99%", percent(99.99)}));

class RejectedSize : public ::testing::TestWithParam<char const*> {};

TEST_P(RejectedSize, IsRejected)
{
  auto const parsed = parse_size(GetParam());
  EXPECT_FALSE(parsed.has_value()) << "'" << GetParam() << "' was accepted as " << parsed->to_string();
}

INSTANTIATE_TEST_SUITE_P(Malformed, RejectedSize,
                         ::testing::Values("", " ", "\t\n", "lots", "-1", "-0", "--1", "+1", "-1GiB", "-5%", "4 GiBs",
                                           "1e9", "1E9", "0x10", "GiB", "KiB", "B", "1..5G", "1.5.5G", "1.", ".5G",
                                           "1.G", "%", "25 %%", "25%%", "25% GiB", "4 G iB", "4Gi", "4Ki", "4 bytes",
                                           "4KiBB", "4 4", "4,5G", "1_000", "4GiB extra", "four", "nan%", "inf",
                                           "1\xef\xbc\x90"));

INSTANTIATE_TEST_SUITE_P(AmbiguousDecimalUnits, RejectedSize,
                         ::testing::Values("4KB", "4kb", "4MB", "4Mb", "4GB", "4gb", "4 GB", "1.5GB", "2TB", "2tB"));

INSTANTIATE_TEST_SUITE_P(FractionOfAByte, RejectedSize,
                         ::testing::Values("1.5", "0.5", "1.0", "1.5B", "1.0 b", "1048576.0"));

INSTANTIATE_TEST_SUITE_P(Overflow, RejectedSize,
                         ::testing::Values("18446744073709551616", "99999999999999999999", "17179869184TiB",
                                           "16777216TiB", "16777216.5TiB", "17179869184GiB", "18014398509481984K",
                                           "99999999999999999999999K"));

INSTANTIATE_TEST_SUITE_P(PercentOutOfRange, RejectedSize,
                         ::testing::Values("101%", "100.0001%", "100.00000000000000000001%", "150%", "1000%",
                                           "99999999999999999999999%"));

TEST(SizeResolve, BytesIgnoreTheTotal)
{
  EXPECT_EQ(bytes(4 * GiB).resolve(143771 * MiB, 0), 4 * GiB);
  EXPECT_EQ(bytes(4 * GiB).resolve(0, 0), 4 * GiB);
  EXPECT_EQ(bytes(0).resolve(143771 * MiB, 0), 0u);
}

TEST(SizeResolve, PercentOfAnH200)
{
  std::uint64_t const total = 143771 * MiB;  // 150754820096 bytes
  ASSERT_EQ(total, 150754820096u);
  EXPECT_EQ(parse_size("25%")->resolve(total, 0), 37688705024u);
  EXPECT_EQ(parse_size("50%")->resolve(total, 0), 75377410048u);
  EXPECT_EQ(parse_size("12.5%")->resolve(total, 0), 18844352512u);
  EXPECT_EQ(parse_size("100%")->resolve(total, 0), total);
  EXPECT_EQ(parse_size("0%")->resolve(total, 0), 0u);
  // 150754820096 * 0.333 = 50201355091.968: rounds down.
  EXPECT_EQ(parse_size("33.3%")->resolve(total, 0), 50201355091u);
  // 150754820096 * 0.0001 = 15075482.0096
  EXPECT_EQ(parse_size("0.01%")->resolve(total, 0), 15075482u);
  // 150754820096 * 0.999 = 150604065275.904
  EXPECT_EQ(parse_size("99.9%")->resolve(total, 0), 150604065275u);
}

TEST(SizeResolve, PercentRoundsDown)
{
  EXPECT_EQ(parse_size("1%")->resolve(199, 0), 1u);        // 1.99
  EXPECT_EQ(parse_size("50%")->resolve(3, 0), 1u);         // 1.5
  EXPECT_EQ(parse_size("33.3%")->resolve(1000, 0), 333u);  // exactly 333, not 332
  EXPECT_EQ(parse_size("10%")->resolve(1000, 0), 100u);    // exactly 100, not 99
  EXPECT_EQ(parse_size("99.99%")->resolve(1, 0), 0u);
  EXPECT_EQ(parse_size("100%")->resolve(1, 0), 1u);
}

TEST(SizeResolve, PercentOfHugeTotalsKeepsPrecision)
{
  std::uint64_t const max = std::numeric_limits<std::uint64_t>::max();
  EXPECT_EQ(parse_size("100%")->resolve(max, 0), max);
  EXPECT_EQ(parse_size("50%")->resolve(max, 0), max / 2);  // 9223372036854775807.5
  EXPECT_EQ(parse_size("25%")->resolve(std::uint64_t{1} << 62, 0), std::uint64_t{1} << 60);
  EXPECT_EQ(parse_size("12.5%")->resolve((std::uint64_t{1} << 63) + 8, 0), (std::uint64_t{1} << 60) + 1);
}

TEST(SizeResolve, OutOfRangePercentsSetInCodeAreClamped)
{
  EXPECT_EQ(percent(-5).resolve(1000, 0), 0u);
  EXPECT_EQ(percent(250).resolve(1000, 0), 1000u);
  EXPECT_EQ(percent(std::numeric_limits<double>::quiet_NaN()).resolve(1000, 0), 0u);
}

TEST(SizeToString, BytesUseTheLargestExactBinaryUnit)
{
  EXPECT_EQ(bytes(0).to_string(), "0B");
  EXPECT_EQ(bytes(1).to_string(), "1B");
  EXPECT_EQ(bytes(1000).to_string(), "1000B");
  EXPECT_EQ(bytes(1023).to_string(), "1023B");
  EXPECT_EQ(bytes(KiB).to_string(), "1KiB");
  EXPECT_EQ(bytes(1536).to_string(), "1536B");
  EXPECT_EQ(bytes(3 * KiB).to_string(), "3KiB");
  EXPECT_EQ(bytes(1536 * MiB).to_string(), "1536MiB");
  EXPECT_EQ(bytes(4 * GiB).to_string(), "4GiB");
  EXPECT_EQ(bytes(2 * TiB).to_string(), "2TiB");
  EXPECT_EQ(bytes(2048 * TiB).to_string(), "2048TiB");
  EXPECT_EQ(bytes(GiB + 1).to_string(), "1073741825B");
  EXPECT_EQ(bytes(std::numeric_limits<std::uint64_t>::max()).to_string(), "18446744073709551615B");
}

TEST(SizeToString, PercentagesHaveNoTrailingZeros)
{
  EXPECT_EQ(percent(25).to_string(), "25%");
  EXPECT_EQ(percent(12.5).to_string(), "12.5%");
  EXPECT_EQ(percent(0).to_string(), "0%");
  EXPECT_EQ(percent(100).to_string(), "100%");
  EXPECT_EQ(percent(33.3).to_string(), "33.3%");
  EXPECT_EQ(percent(0.00001).to_string(), "0.00001%");  // never 1e-05%
  EXPECT_EQ(parse_size("12.50%")->to_string(), "12.5%");
  EXPECT_EQ(parse_size("1.5GiB")->to_string(), "1536MiB");
  EXPECT_EQ(parse_size("1048576")->to_string(), "1MiB");
}

class SizeRoundTrip : public ::testing::TestWithParam<size_spec> {};

TEST_P(SizeRoundTrip, ParseOfToStringGivesTheSameValue)
{
  size_spec const original = GetParam();
  std::string const text = original.to_string();
  auto const reparsed = parse_size(text);
  ASSERT_TRUE(reparsed.has_value()) << "to_string gave '" << text << "', which parse_size rejects";
  EXPECT_EQ(*reparsed, original) << "via '" << text << "'";
}

INSTANTIATE_TEST_SUITE_P(Values, SizeRoundTrip,
                         ::testing::Values(bytes(0), bytes(1), bytes(1000), bytes(1023), bytes(KiB), bytes(1536),
                                           bytes(1536 * MiB), bytes(4 * GiB), bytes(2 * TiB), bytes(16777215 * TiB),
                                           bytes(GiB + 1), bytes(std::numeric_limits<std::uint64_t>::max()), percent(0),
                                           percent(25), percent(12.5), percent(100), percent(33.3), percent(0.001),
                                           percent(0.00001), percent(99.99999), percent(1.0 / 3.0)));

}  // namespace
