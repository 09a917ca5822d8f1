#include "diag/collective_progress_publisher.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <unistd.h>

#include <fstream>
#include <mutex>
#include <optional>

#include "util/host_name.h"
#include "wire/collective_progress.h"
#include "diag/step_counters.h"
#include "diag/stack_dump.h"
#include "rankwise/diag/flight_recorder.h"

namespace rankwise::diag {

namespace {

constexpr auto kBatchInterval = std::chrono::milliseconds(20);
constexpr auto kHeartbeat = std::chrono::seconds(1);
// Step rates are averaged over at least this much of the rank's time.
constexpr int64_t kRateWindowNs = 1'000'000'000;

// Resident set size from /proc/self/statm (pages); 0 when unreadable.
int64_t rss_bytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t size = 0, resident = 0;
  if (!(statm >> size >> resident)) return 0;
  return resident * static_cast<int64_t>(::sysconf(_SC_PAGESIZE));
}

}  // namespace

struct CollectiveProgressPublisher::State {
  std::mutex mutex;
  std::condition_variable wake;
  std::condition_variable written;
  std::condition_variable stopped;  // the batch interval's wait: only stop ends it early
  bool idle = false;  // the thread waits for work: notify() must wake it
  uint64_t wanted = 0;   // generation asked for (notify/flush)
  uint64_t done = 0;     // generation written
  bool stop = false;
  bool finished = false;  // the thread ended
  c10::intrusive_ptr<c10d::Store> store;
  std::shared_ptr<const FlightRecorder> recorder;
  int rank = 0;
  int pid = 0;
  std::string host;
  bool stack_dump = false;
  std::string default_device;
  // Heartbeat (publisher's thread only): the reading that opened the current
  // rate window, the last rates, the last RSS and when it was read.
  std::optional<StepSample> window;
  std::optional<StepRates> rates;
  int64_t rss = 0;
  int64_t rss_read_ms = 0;

  void add_heartbeat(wire::CollectiveProgress& p) {
    const StepSample sample = step_sample();
    if (sample.steps > 0) {
      if (!window) {
        window = sample;  // the first step's end opens the first window
      } else if (sample.end_ns - window->end_ns >= kRateWindowNs) {
        if (auto r = rates_between(*window, sample)) rates = r;
        window = sample;
      }
      p.step = sample.steps;
      p.loss = sample.loss;
      if (rates) {
        p.step_ms = rates->step_ms;
        p.wait_ms = rates->wait_ms;
        p.samples_per_s = rates->samples_per_s;
      }
    }
    if (p.heartbeat_ms - rss_read_ms >= 1000) {
      rss = rss_bytes();
      rss_read_ms = p.heartbeat_ms;
    }
    p.rss_bytes = rss;
    const std::string device = step_device();
    p.device = device.empty() ? default_device : device;
  }

  wire::CollectiveProgress snapshot(bool exited) {
    wire::CollectiveProgress p;
    const CollectiveRecord last = recorder->last_entered();
    p.entered = last.sequence;
    p.completed = recorder->last_completed();
    p.failed = last.state == CollectiveRecord::State::kFailed;
    if (last.sequence > 0) {
      p.last = describe(last);
      p.entered_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                         last.enqueued.time_since_epoch()).count();
      if (last.state != CollectiveRecord::State::kEntered) {
        p.ended_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                         last.ended.time_since_epoch()).count();
      }
    }
    p.heartbeat_ms = wire::unix_ms_now();
    p.exited = exited;
    p.pid = pid;
    p.host = host;
    p.stack_dump = stack_dump;
    add_heartbeat(p);
    return p;
  }

  void write(bool exited) {
    const std::string value = wire::encode_progress(snapshot(exited));
    try {
      store->set(wire::progress_key(rank), std::vector<uint8_t>(value.begin(), value.end()));
    } catch (const std::exception&) {
      // The store is gone (the launcher ended) or failing: progress is
      // diagnostics only, never a reason to fail training.
    }
  }

  // Something changed: publish soon (never blocks on the store).
  void notify() {
    bool wake_thread = false;
    {
      std::lock_guard<std::mutex> lock(mutex);
      ++wanted;
      wake_thread = idle;
    }
    // Only an idle thread needs a wake-up; one in its batch interval writes
    // the latest state when the interval ends.
    if (wake_thread) wake.notify_one();
  }

  void run() {
    std::unique_lock<std::mutex> lock(mutex);
    for (;;) {
      idle = true;
      wake.wait_for(lock, kHeartbeat, [&] { return stop || wanted > done; });
      idle = false;
      if (stop) break;
      const uint64_t generation = wanted;
      lock.unlock();
      write(false);
      lock.lock();
      done = std::max(done, generation);
      written.notify_all();
      // Batch: collectives that end within the next 20 ms share one write.
      stopped.wait_for(lock, kBatchInterval, [&] { return stop; });
      if (stop) break;
    }
    lock.unlock();
    write(true);
    lock.lock();
    finished = true;
    written.notify_all();
  }
};

CollectiveProgressPublisher::CollectiveProgressPublisher(const std::string& addr, int port, const std::string& prefix,
                                     int rank, std::shared_ptr<const FlightRecorder> recorder,
                                     std::chrono::milliseconds connect_timeout,
                                     std::string device)
    : state_(std::make_shared<State>()) {
  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(port);
  options.isServer = false;
  options.waitWorkers = false;
  options.timeout = connect_timeout;
  auto tcp = c10::make_intrusive<c10d::TCPStore>(addr, options);
  state_->store = c10::make_intrusive<c10d::PrefixStore>(prefix, tcp);
  state_->recorder = std::move(recorder);
  state_->rank = rank;
  state_->pid = static_cast<int>(::getpid());
  state_->host = util::host_name();
  // A rank that publishes its progress can also show its stacks in a hang report.
  state_->stack_dump = install_stack_dump();
  state_->default_device = std::move(device);
  state_->wanted = 1;  // publish at once: "in no collective yet" is progress too
  thread_ = std::thread([state = state_] { state->run(); });
  // Each step is published as soon as it is recorded (batched as collectives are).
  step_listener_ = set_step_listener([state = state_] { state->notify(); });
}

CollectiveProgressPublisher::~CollectiveProgressPublisher() {
  remove_step_listener(step_listener_);
  std::unique_lock<std::mutex> lock(state_->mutex);
  state_->stop = true;
  state_->wake.notify_all();
  state_->stopped.notify_all();
  const bool ended = state_->written.wait_for(lock, std::chrono::seconds(2),
                                              [&] { return state_->finished; });
  lock.unlock();
  if (ended) {
    thread_.join();
  } else {
    thread_.detach();  // it owns a reference to its state
  }
}

void CollectiveProgressPublisher::notify() { state_->notify(); }

void CollectiveProgressPublisher::flush(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(state_->mutex);
  const uint64_t generation = ++state_->wanted;
  state_->wake.notify_one();
  state_->written.wait_for(lock, timeout,
                           [&] { return state_->done >= generation || state_->finished; });
}

}  // namespace rankwise::diag
