// RemoteKey blobs (MemoryRegion::remote_key, RemoteKey::deserialize) with
// every validation at its edge, and the cross-process fabric's endpoint text
// (fabric/endpoint.hpp): parsing, this host's id, and what a NIC of each
// DeviceOptions::Fabric advertises and refuses, in one process.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "fabric/endpoint.hpp"
#include "kinet/kinet.hpp"
#include "test_util.hpp"

namespace {
using kinet::Error;
using kinet::ErrorCode;
using kinet::RemoteKey;

using kinet::test::expect_error;

RemoteKey sample() {
  RemoteKey k;
  k.provider = 1;
  k.node = 0x0123456789abcdefull;
  k.addr = 0x7f0000001000ull;
  k.length = 4096;
  k.rkey = 0x12345678;
  k.access = kinet::kRemoteRead | kinet::kRemoteWrite;
  return k;
}
RemoteKey parse(const std::vector<uint8_t>& b) { return RemoteKey::deserialize(b.data(), b.size()); }

TEST(RemoteKey, RoundTripsEveryField) {
  RemoteKey k = sample();
  k.packed = {1, 2, 3, 0, 5};
  const auto b = k.serialize();
  ASSERT_EQ(b.size(), RemoteKey::kHeaderBytes + 5);
  const RemoteKey r = parse(b);
  EXPECT_EQ(r.version, 1);
  EXPECT_EQ(r.provider, 1);
  EXPECT_EQ(r.node, k.node);
  EXPECT_EQ(r.addr, k.addr);
  EXPECT_EQ(r.length, k.length);
  EXPECT_EQ(r.rkey, k.rkey);
  EXPECT_EQ(r.access, k.access);
  EXPECT_EQ(r.packed, k.packed);
  EXPECT_EQ(r.key().be, kinet::detail::bswap32_constexpr(0x12345678u));
}

TEST(RemoteKey, CoversItsRangeExactly) {
  const RemoteKey k = sample();
  EXPECT_TRUE(k.covers(k.addr, 4096));
  EXPECT_TRUE(k.covers(k.addr + 4095, 1));
  EXPECT_TRUE(k.covers(k.addr + 4096, 0));
  EXPECT_FALSE(k.covers(k.addr + 4095, 2));
  EXPECT_FALSE(k.covers(k.addr - 1, 1));
  EXPECT_FALSE(k.covers(k.addr + 4097, 0));
  EXPECT_FALSE(k.covers(k.addr + 1, std::numeric_limits<uint64_t>::max()));
}

TEST(RemoteKey, HeaderChecksAtTheirEdges) {
  const auto good = sample().serialize();
  expect_error([&] { RemoteKey::deserialize(nullptr, 48); }, ErrorCode::InvalidArgument, "remote key: blob is a null pointer");
  expect_error([&] { RemoteKey::deserialize(good.data(), 47); }, ErrorCode::InvalidArgument,
               "blob has 47 bytes, shorter than its 48-byte header");
  auto b = good;
  b[0] ^= 1;
  expect_error([&] { parse(b); }, ErrorCode::InvalidArgument, "bad magic 0x524e4b30, expected 0x524e4b31");
  b = good;
  b[4] = 2;
  expect_error([&] { parse(b); }, ErrorCode::InvalidArgument, "version 2 is not supported (expected 1)");
  b = good;
  b.push_back(0);
  expect_error([&] { parse(b); }, ErrorCode::InvalidArgument, "blob has 49 bytes, expected 48");
  b = good;
  b[40] = 1;  // announces one packed byte that is not there
  expect_error([&] { parse(b); }, ErrorCode::InvalidArgument, "blob has 48 bytes, expected 49");
  for (size_t i : {42u, 47u}) {
    b = good;
    b[i] = 0x80;
    expect_error([&] { parse(b); }, ErrorCode::InvalidArgument,
                 "reserved byte " + std::to_string(i) + " is 0x80, must be 0");
  }
}

TEST(RemoteKey, FieldChecksAtTheirEdges) {
  auto with = [](auto edit) {
    RemoteKey k = sample();
    edit(k);
    return k;
  };
  // Through serialize() (which validates) and through crafted bytes.
  auto both = [&](const RemoteKey& k, const std::string& part) {
    expect_error([&] { k.serialize(); }, ErrorCode::InvalidArgument, "remote key: " + part);
    RemoteKey ok = sample();
    auto b = ok.serialize();
    std::memcpy(b.data() + 6, &k.provider, 2);
    std::memcpy(b.data() + 16, &k.addr, 8);
    std::memcpy(b.data() + 24, &k.length, 8);
    std::memcpy(b.data() + 36, &k.access, 4);
    expect_error([&] { parse(b); }, ErrorCode::InvalidArgument, "remote key: " + part);
  };
  both(with([](RemoteKey& k) { k.provider = 0; }), "unknown provider 0 (1 = emu, 2 = mlx5, 3 = transport)");
  both(with([](RemoteKey& k) { k.provider = 4; }), "unknown provider 4");
  EXPECT_NO_THROW(with([](RemoteKey& k) { k.provider = 2; }).serialize());
  EXPECT_NO_THROW(with([](RemoteKey& k) { k.provider = RemoteKey::kTransport; }).serialize());
  both(with([](RemoteKey& k) { k.length = 0; }), "length is 0");
  both(with([](RemoteKey& k) { k.addr = ~0ull, k.length = 1; }),
       "region [0xffffffffffffffff, +0x1) wraps past the end of the address space");
  EXPECT_NO_THROW(parse(with([](RemoteKey& k) { k.addr = ~0ull - 1, k.length = 1; }).serialize()));
  both(with([](RemoteKey& k) { k.access = kinet::kAccessAll | 0x10; }), "unknown access bits 0x10");
  EXPECT_NO_THROW(with([](RemoteKey& k) { k.access = kinet::kAccessAll; }).serialize());
  // Packed keys: kMaxPacked passes, one more does not (in either direction).
  RemoteKey k = sample();
  k.packed.assign(RemoteKey::kMaxPacked, 0xab);
  EXPECT_EQ(parse(k.serialize()).packed.size(), RemoteKey::kMaxPacked);
  k.packed.push_back(0);
  expect_error([&] { k.serialize(); }, ErrorCode::InvalidArgument, "packed key of 1025 bytes is longer than 1024");
  k.packed.pop_back();
  auto b = k.serialize();
  b.push_back(0);
  const uint16_t n = RemoteKey::kMaxPacked + 1;
  std::memcpy(b.data() + 40, &n, 2);
  expect_error([&] { parse(b); }, ErrorCode::InvalidArgument, "packed key of 1025 bytes is longer than 1024");
}

TEST(RemoteKey, EmuRegionDescribesItselfAndItsNic) {
  kinet::DeviceOptions o;
  o.emu_fabric = kinet::DeviceOptions::Fabric::Local;
  auto dev = kinet::Device::open("emu", o);
  auto pd = dev->alloc_pd();
  std::vector<uint8_t> buf(1000);
  auto mr = pd->reg_mr(buf.data(), buf.size(), kinet::kLocalWrite | kinet::kRemoteRead);
  auto qp = pd->create_qp();
  const RemoteKey k = parse(mr->remote_key().serialize());
  EXPECT_EQ(k.provider, 1);
  EXPECT_EQ(k.node, qp->info().node);
  EXPECT_EQ(k.addr, mr->addr_u64());
  EXPECT_EQ(k.length, 1000u);
  EXPECT_EQ(k.rkey, mr->rkey_value());
  EXPECT_EQ(k.key().be, mr->rkey().be);
  EXPECT_EQ(k.access, uint32_t(kinet::kLocalWrite | kinet::kRemoteRead));
  EXPECT_TRUE(k.packed.empty());
}

// ---- endpoints ------------------------------------------------------------------
namespace fab = kinet::fabric;
const std::string kBoot = "493390b4-9341-4065-b1a7-e9c94feeeb7a";

TEST(Endpoint, ThisHostIsTheBootIdAndTheNetworkNamespace) {
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::string boot;
  std::getline(f, boot);
  struct stat st {};
  ASSERT_EQ(::stat("/proc/self/ns/net", &st), 0);
  EXPECT_EQ(fab::this_host().boot_id, boot);
  EXPECT_EQ(fab::this_host().netns, static_cast<uint64_t>(st.st_ino));
}

TEST(Endpoint, ParsesEachFormAndBoth) {
  fab::Endpoint e = fab::parse_endpoint("tcp 10.0.0.2:41234");
  EXPECT_EQ(e.tcp, "tcp 10.0.0.2:41234");
  EXPECT_TRUE(e.shm_name.empty());
  e = fab::parse_endpoint("shm 9f3c host " + kBoot + " netns 4026531992");
  EXPECT_TRUE(e.tcp.empty());
  EXPECT_EQ(e.shm_name, "9f3c");
  EXPECT_EQ(e.shm_host.boot_id, kBoot);
  EXPECT_EQ(e.shm_host.netns, 4026531992u);
  e = fab::parse_endpoint("tcp [fe80::1%2]:5, shm a host " + kBoot + " netns 18446744073709551615");
  EXPECT_EQ(e.tcp, "tcp [fe80::1%2]:5");
  EXPECT_EQ(e.shm_name, "a");
  EXPECT_EQ(e.shm_host.netns, ~0ull);
}

TEST(Endpoint, RefusesMalformedText) {
  const std::string shm = "shm a host " + kBoot + " netns 1";
  const auto I = ErrorCode::InvalidArgument;
  expect_error([] { fab::parse_endpoint(""); }, I, "endpoint \"\": empty");
  expect_error([] { fab::parse_endpoint("udp 1.2.3.4:5"); }, I, "alternative \"udp 1.2.3.4:5\" is neither");
  expect_error([&] { fab::parse_endpoint("tcp a:1, tcp b:2"); }, I, "two tcp alternatives");
  expect_error([&] { fab::parse_endpoint(shm + ", " + shm); }, I, "two shm alternatives");
  expect_error([&] { fab::parse_endpoint("tcp a:1, " + shm + ", tcp b:2"); }, I, "more than two alternatives");
  expect_error([&] { fab::parse_endpoint("shm a host " + kBoot); }, I, "lacks \"netns <inode>\"");
  expect_error([&] { fab::parse_endpoint("shm a host " + kBoot + " netns 1x"); }, I, "lacks \"netns <inode>\"");
  expect_error([&] { fab::parse_endpoint("shm a host " + kBoot + " netns 18446744073709551616"); }, I,
               "netns inode 18446744073709551616 is out of range");
  expect_error([&] { fab::parse_endpoint("shm a host " + kBoot.substr(1) + "0 netns 1"); }, I, "lacks \"host <boot id>\"");
  expect_error([&] { fab::parse_endpoint("shm a/b host " + kBoot + " netns 1"); }, I,
               "shm listener name \"a/b\" is not 1..90 of [0-9A-Za-z._-]");
  expect_error([&] { fab::parse_endpoint("shm " + std::string(91, 'a') + " host " + kBoot + " netns 1"); }, I,
               "is not 1..90");
  EXPECT_NO_THROW(fab::parse_endpoint("shm " + std::string(90, 'a') + " host " + kBoot + " netns 1"));
  expect_error([&] { fab::parse_endpoint(shm + " x"); }, I, "trailing \"x\" after the shm alternative");
  expect_error([&] { fab::parse_endpoint("shm a  host " + kBoot + " netns 1"); }, I, "extra spaces");
}

std::unique_ptr<kinet::Device> open(kinet::DeviceOptions::Fabric f) {
  kinet::DeviceOptions o;
  o.emu_fabric = f;
  return kinet::Device::open("emu", o);
}

TEST(Endpoint, EachFabricAdvertisesItsListeners) {
  using F = kinet::DeviceOptions::Fabric;
  ::setenv("KINET_SOCKET_IFNAME", "=lo", 1);
  const std::string host = fab::this_host().str();
  auto t = open(F::Tcp), s = open(F::Shm), a = open(F::Auto);
  auto tp = t->alloc_pd(), sp = s->alloc_pd(), ap = a->alloc_pd();
  auto tq = tp->create_qp(), sq = sp->create_qp(), aq = ap->create_qp();
  const std::string te = tq->info().endpoint, se = sq->info().endpoint, ae = aq->info().endpoint;
  EXPECT_EQ(te.rfind("tcp 127.0.0.1:", 0), 0u) << te;
  EXPECT_EQ(se.rfind("shm ", 0), 0u) << se;
  EXPECT_EQ(se.substr(se.size() - host.size()), host) << se;
  EXPECT_EQ(ae, te + ", " + se) << "one listener of each kind per process";
  const fab::Endpoint e = fab::parse_endpoint(ae);
  EXPECT_EQ(e.shm_host, fab::this_host());
  // Round trip through the QP info blob.
  const auto blob = aq->info().serialize();
  EXPECT_EQ(kinet::QpInfo::deserialize(blob.data(), blob.size()).endpoint, ae);
}

// A NIC connects only through the transports of its fabric; an endpoint that
// offers none of them is NotFound at to_rtr, saying why.
TEST(Endpoint, NoTransportInCommonIsNotFound) {
  using F = kinet::DeviceOptions::Fabric;
  ::setenv("KINET_SOCKET_IFNAME", "=lo", 1);
  auto t = open(F::Tcp), s = open(F::Shm);
  auto remote = [](const std::string& ep) {
    kinet::QpInfo r{};
    r.magic = kinet::QpInfo::kMagic;
    r.version = 1;
    r.provider = 1;
    r.node = 0x5eed;  // not a NIC of this process
    r.qpn = 0x100;
    r.mtu = 5;
    r.port = 1;
    r.endpoint = ep;
    return r;
  };
  const std::string other_host = "shm peer host " + kBoot + " netns 1";
  const auto N = ErrorCode::NotFound;
  {
    auto pd = t->alloc_pd();
    auto q = pd->create_qp();
    q->to_init(kinet::kAccessAll);
    expect_error([&] { q->to_rtr(remote(other_host)); }, N,
                 "no transport in common: this NIC is on the tcp fabric, and the peer offers no tcp listener");
    EXPECT_EQ(q->state(), kinet::QpState::Init);
  }
  {
    auto pd = s->alloc_pd();
    auto q = pd->create_qp();
    q->to_init(kinet::kAccessAll);
    expect_error([&] { q->to_rtr(remote("tcp 127.0.0.1:9")); }, N,
                 "this NIC is on the shm fabric, and the peer offers no shm listener");
    expect_error([&] { q->to_rtr(remote(other_host)); }, N,
                 "the peer is on another host (host " + kBoot + " netns 1; this process: " + fab::this_host().str());
    expect_error([&] { q->to_rtr(remote("bogus")); }, ErrorCode::InvalidArgument,
                 "endpoint \"bogus\": alternative \"bogus\" is neither");
    EXPECT_EQ(q->state(), kinet::QpState::Init);
  }
}

TEST(Endpoint, FabricFromTheEnvironment) {
  ::setenv("KINET_SOCKET_IFNAME", "=lo", 1);
  ::setenv("KINET_EMU_FABRIC", "shm", 1);
  {
    auto d = kinet::Device::open("emu");
    auto pd = d->alloc_pd();
    EXPECT_EQ(pd->create_qp()->info().endpoint.rfind("shm ", 0), 0u);
  }
  ::setenv("KINET_EMU_FABRIC", "shmm", 1);
  expect_error([] { kinet::Device::open("emu"); }, ErrorCode::InvalidArgument,
               "KINET_EMU_FABRIC=shmm is none of local, tcp, shm, auto");
  ::unsetenv("KINET_EMU_FABRIC");
  kinet::DeviceOptions o;
  o.emu_fabric = static_cast<kinet::DeviceOptions::Fabric>(5);
  expect_error([&] { kinet::Device::open("emu", o); }, ErrorCode::InvalidArgument, "emu_fabric 5 is unknown");
}

}  // namespace
