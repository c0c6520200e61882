// Local rank and device selection (src/rank/local_rank.{h,cpp}). MPI's shared-memory rank is the
// authority; launcher variables are only cross-checked, and a note is set only on disagreement.
#include <doctest/doctest.h>

#include <string>

#include "rank/local_rank.h"
#include "test_util.h"

using llama2::LocalRank;

namespace {
using llama2::test::contains;
}  // namespace

TEST_SUITE("local_rank") {
  TEST_CASE("no launcher variables: MPI values, no note") {
    const LocalRank r = llama2::resolve_local_rank(3, 4, nullptr, nullptr);
    CHECK(r.local_rank == 3);
    CHECK(r.local_size == 4);
    CHECK(r.note.empty());
  }

  TEST_CASE("agreeing variables: no note") {
    for (const auto& [slurm, ompi] :
         {std::pair<const char*, const char*>{"3", "3"}, {"3", nullptr}, {nullptr, "3"}}) {
      const LocalRank r = llama2::resolve_local_rank(3, 8, slurm, ompi);
      CHECK(r.local_rank == 3);
      CHECK(r.local_size == 8);
      CHECK(r.note.empty());
    }
    CHECK(llama2::resolve_local_rank(0, 1, "0", "0").note.empty());
  }

  TEST_CASE("SLURM_LOCALID disagreeing: MPI value kept, note names the variable") {
    const LocalRank r = llama2::resolve_local_rank(3, 4, "2", "3");
    CHECK(r.local_rank == 3);
    CHECK(r.local_size == 4);
    CAPTURE(r.note);
    CHECK(contains(r.note, "SLURM_LOCALID=2"));
    CHECK(contains(r.note, "3"));
    CHECK_FALSE(contains(r.note, "OMPI_COMM_WORLD_LOCAL_RANK"));
  }

  TEST_CASE("OMPI_COMM_WORLD_LOCAL_RANK disagreeing: MPI value kept, note names the variable") {
    const LocalRank r = llama2::resolve_local_rank(1, 2, nullptr, "0");
    CHECK(r.local_rank == 1);
    CHECK(r.local_size == 2);
    CAPTURE(r.note);
    CHECK(contains(r.note, "OMPI_COMM_WORLD_LOCAL_RANK=0"));
    CHECK_FALSE(contains(r.note, "SLURM_LOCALID"));
  }

  TEST_CASE("both disagreeing: a note is set and the MPI value kept") {
    const LocalRank r = llama2::resolve_local_rank(2, 4, "0", "1");
    CHECK(r.local_rank == 2);
    CAPTURE(r.note);
    CHECK_FALSE(r.note.empty());
    CHECK(
        (contains(r.note, "SLURM_LOCALID=0") || contains(r.note, "OMPI_COMM_WORLD_LOCAL_RANK=1")));
  }

  TEST_CASE("unparsable values count as disagreement") {
    for (const char* bad : {"", "abc", "-1", "3x", "3 ", "2.0", "99999999999999999999"}) {
      CAPTURE(bad);
      const LocalRank r = llama2::resolve_local_rank(3, 4, bad, nullptr);
      CHECK(r.local_rank == 3);
      CHECK(r.local_size == 4);
      CHECK(contains(r.note, std::string("SLURM_LOCALID=") + bad));
      const LocalRank o = llama2::resolve_local_rank(3, 4, "3", bad);
      CHECK(o.local_rank == 3);
      CHECK(contains(o.note, std::string("OMPI_COMM_WORLD_LOCAL_RANK=") + bad));
    }
  }

  TEST_CASE("device_for_local_rank: round robin, -1 without devices") {
    CHECK(llama2::device_for_local_rank(0, 4) == 0);
    CHECK(llama2::device_for_local_rank(3, 4) == 3);
    CHECK(llama2::device_for_local_rank(4, 4) == 0);
    CHECK(llama2::device_for_local_rank(5, 4) == 1);
    CHECK(llama2::device_for_local_rank(7, 8) == 7);
    CHECK(llama2::device_for_local_rank(9, 1) == 0);
    CHECK(llama2::device_for_local_rank(6, 3) == 0);
    CHECK(llama2::device_for_local_rank(0, 0) == -1);
    CHECK(llama2::device_for_local_rank(5, 0) == -1);
    CHECK(llama2::device_for_local_rank(2, -1) == -1);
  }
}
