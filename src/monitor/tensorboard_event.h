#pragma once
// TensorBoard's Event messages (tensorboard_event.proto) serialized with
// protobuf. This file and tensorboard_event.cpp are all of rankwise that sees
// protobuf: they form the static library rankwise_tensorboard_event
// (src/monitor/CMakeLists.txt), compiled without libtorch's include
// directories (the torch wheel ships its own copy of protobuf's headers) and
// with hidden symbols, so librankwise.so exports nothing of protobuf.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace rankwise::monitor {

/// The version TensorBoard expects in a file's first event.
inline constexpr const char* kTensorBoardFileVersion = "brain.Event:2";

/// The bytes of Event{wall_time, file_version: "brain.Event:2"}.
std::string serialize_file_version_event(double wall_time);

/// The bytes of Event{wall_time, step, summary{value{tag, simple_value}...}}:
/// one Value per pair, in this order (each value rounded to float, as
/// TensorBoard's simple_value holds it).
std::string serialize_scalars_event(double wall_time, int64_t step,
                                    const std::vector<std::pair<std::string, double>>& values);

}  // namespace rankwise::monitor
