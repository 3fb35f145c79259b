// kinet NCCL plugin — the tables this library exports (plugin.cpp) and what
// both halves fill alike.
#pragma once
#include "common.hpp"

namespace kinet::nccl {

// The GIN v11 table (PROXY type), exported as ncclGinPlugin_v11.
extern const GinV11 kGinV11;
// The net v11 table (HOST type), exported as ncclNetPlugin_v11.
extern const NetV11 kNetV11;

// kinet's one device as NCCL sees it, with netDeviceType `type`.
void fill_properties(Properties* p, DeviceType type);

}  // namespace kinet::nccl
