// The bytes between the front (world rank 0) and each replica's leader (docs/ARCHITECTURE.md,
// "Data parallelism"): the request_messages.h values and the leader's gauges, packed as records
// into one buffer per MPI message (a leader sends one per engine step).
//
// A record is a one-byte tag and its fields in a fixed order: integers in the host's byte order
// (every rank runs the same binary on the same kind of machine), strings and int vectors as a
// uint32 count and their elements. To add a field to a message, write it at the end of its
// encoder and read it at the end of its decoder (both below in replica_wire.cpp, one function
// each); the front and the leaders always run the same binary, so there are no versions.
// SamplingParams travel as their JSON form (sampling_to_json), so a new sampling field needs no
// change here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/speculative_config.h"
#include "coordinator/requests/request_messages.h"

namespace llama2 {

// A leader's view of its replica, sent with every message it sends (and at least every
// kReplicaHeartbeat when idle).
struct ReplicaGauges {
  int running = 0;          // sequences in its batch scheduler
  int pending = 0;          // submitted by the front, waiting for a batch slot on the leader
  int kv_used = 0;          // KV blocks in use
  int kv_total = 0;         // KV blocks of the replica
  int64_t steps = 0;        // engine steps run so far
  int64_t preemptions = 0;  // sequences preempted so far (batch_scheduler.h)
  SpecCounters spec{};      // speculative decoding's counters (batch_scheduler.h)
};

class WireWriter {
 public:
  // Front -> leader.
  void submit(const SubmitRequest& req);
  void cancel(const CancelRequest& c);
  void shutdown(int exit_code);
  // Leader -> front.
  void gauges(const ReplicaGauges& g);
  void token(const TokenEvent& ev);
  void finished(const Finished& done);

  bool empty() const { return buf_.empty(); }
  // The records written so far; the writer is empty afterwards.
  std::string take();

 private:
  std::string buf_;
};

// What a buffer holds, record by record, in order. The front overrides the leader -> front
// records, a leader the others; a record nobody overrides is a bug (Error).
class WireVisitor {
 public:
  virtual ~WireVisitor() = default;
  virtual void on_submit(SubmitRequest&& req);
  virtual void on_cancel(const CancelRequest& c);
  virtual void on_shutdown(int exit_code);
  virtual void on_gauges(const ReplicaGauges& g);
  virtual void on_token(const TokenEvent& ev);
  virtual void on_finished(Finished&& done);
};

// Decodes every record of `data` into `v`; Error naming the offset for a truncated buffer or an
// unknown tag.
void read_wire(const char* data, size_t size, WireVisitor& v);

}  // namespace llama2
