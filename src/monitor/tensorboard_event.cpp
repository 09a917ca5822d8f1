#include "monitor/tensorboard_event.h"

#include "tensorboard_event.pb.h"

namespace rankwise::monitor {

std::string serialize_file_version_event(double wall_time) {
  tensorboard_proto::Event event;
  event.set_wall_time(wall_time);
  event.set_file_version(kTensorBoardFileVersion);
  return event.SerializeAsString();
}

std::string serialize_scalars_event(double wall_time, int64_t step,
                                    const std::vector<std::pair<std::string, double>>& values) {
  tensorboard_proto::Event event;
  event.set_wall_time(wall_time);
  event.set_step(step);
  auto* summary = event.mutable_summary();
  for (const auto& [tag, value] : values) {
    auto* v = summary->add_value();
    v->set_tag(tag);
    v->set_simple_value(static_cast<float>(value));
  }
  return event.SerializeAsString();
}

}  // namespace rankwise::monitor
