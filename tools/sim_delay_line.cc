// A link's propagation delay for tools/sim_network.py, without the kernel's netem: a wire
// between a host's veth port and a tap on the simulated switch, in user space, that holds
// every frame for --delay_us each way (the shape of mahimahi's DelayShell, on layer 2). It
// runs in the switch's namespace: frames the host sends arrive on PORT (a packet socket) and
// leave through TAP into the bridge after the delay; frames the bridge sends to the host
// arrive on TAP and leave through PORT, where the link's tbf paces them.
//
// Both sides carry virtio-net headers (PACKET_VNET_HDR, IFF_VNET_HDR), so a TCP segment
// offloaded as one frame of up to 64 KiB crosses as one, checksum still to be filled in: the
// wire costs a copy and a wake-up per offloaded segment, not per 1,500 bytes.
// Order is kept per direction (one FIFO each, every frame the same delay). A frame that
// cannot be handed on because the port's queue refuses it is dropped, as a switch drops.
//
// usage: sim_delay_line --delay_us=N --port=p0 --tap=t0
//   prints "ready" once both ends are open; runs until SIGTERM.
#include <fcntl.h>
#include <linux/if_packet.h>
#include <linux/if_tun.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <arpa/inet.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"

ABSL_FLAG(int64_t, delay_us, 0, "one-way delay of each direction, microseconds");
ABSL_FLAG(std::string, port, "", "the host's veth end in this namespace");
ABSL_FLAG(std::string, tap, "", "a tap device (ip tuntap ... vnet_hdr) on the bridge");

namespace {

// Larger than any frame either side hands over: a 64 KiB GSO frame, its Ethernet and
// virtio-net headers.
constexpr size_t kMaxFrame = 256 * 1024;
// Past this many bytes held in one direction the wire drops, as a full switch buffer does;
// far above what a link of the scaled-down rates holds in flight.
constexpr size_t kMaxQueuedBytes = 64u << 20;

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "sim_delay_line: %s: %s\n", what.c_str(), std::strerror(errno));
  std::exit(1);
}

int64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

int OpenTap(const std::string& name) {
  const int fd = open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) Die("open /dev/net/tun");
  ifreq ifr{};
  ifr.ifr_flags = IFF_TAP | IFF_NO_PI | IFF_VNET_HDR;
  std::snprintf(ifr.ifr_name, IFNAMSIZ, "%s", name.c_str());
  if (ioctl(fd, TUNSETIFF, &ifr) < 0) Die(absl::StrCat("attach to tap ", name));
  // Let the bridge hand over offloaded segments and unfinished checksums as they are.
  const unsigned offloads = TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6 | TUN_F_TSO_ECN;
  if (ioctl(fd, TUNSETOFFLOAD, offloads) < 0) Die(absl::StrCat("offloads of tap ", name));
  return fd;
}

int OpenPort(const std::string& name) {
  const int fd = socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, htons(ETH_P_ALL));
  if (fd < 0) Die("packet socket");
  const int on = 1;
  if (setsockopt(fd, SOL_PACKET, PACKET_VNET_HDR, &on, sizeof(on)) < 0) {
    Die("PACKET_VNET_HDR");
  }
  // Not the frames this program sends out of the port itself.
  if (setsockopt(fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &on, sizeof(on)) < 0) {
    Die("PACKET_IGNORE_OUTGOING");
  }
  // The link's queue (tbf) holds up to its own limit of sent frames charged to this socket.
  const int buffer = 64 << 20;
  setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &buffer, sizeof(buffer));
  setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &buffer, sizeof(buffer));
  sockaddr_ll address{};
  address.sll_family = AF_PACKET;
  address.sll_protocol = htons(ETH_P_ALL);
  address.sll_ifindex = static_cast<int>(if_nametoindex(name.c_str()));
  if (address.sll_ifindex == 0) Die(absl::StrCat("no interface ", name));
  if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) < 0) {
    Die(absl::StrCat("bind to ", name));
  }
  return fd;
}

// One direction of the wire: frames read from `from`, each written to `to` once its delay
// is over.
struct Direction {
  int from;
  int to;
  struct Frame {
    int64_t due_ns;
    std::vector<char> bytes;
  };
  std::deque<Frame> held;
  size_t held_bytes = 0;

  void Take(int64_t delay_ns, std::vector<char>& scratch) {
    for (;;) {
      const ssize_t n = read(from, scratch.data(), scratch.size());
      if (n < 0) {
        if (errno == EAGAIN || errno == EINTR) return;
        if (errno == ENETDOWN || errno == EIO) return;  // a link set down: nothing to take
        Die("read");
      }
      if (n == 0) return;
      if (held_bytes + n > kMaxQueuedBytes) continue;  // dropped
      held.push_back({NowNs() + delay_ns, std::vector<char>(scratch.data(), scratch.data() + n)});
      held_bytes += n;
    }
  }

  // Hands on every frame that is due; a refused frame is dropped (a full queue or a link set
  // down), except when the socket's buffer is full, when the rest wait for EPOLLOUT.
  // Returns false while frames wait for room.
  bool Release(int64_t now_ns) {
    while (!held.empty() && held.front().due_ns <= now_ns) {
      const std::vector<char>& bytes = held.front().bytes;
      if (write(to, bytes.data(), bytes.size()) < 0 && (errno == EAGAIN || errno == EINTR)) {
        return false;
      }
      held_bytes -= bytes.size();
      held.pop_front();
    }
    return true;
  }
};

void Watch(int epoll, int fd, uint32_t events, uint64_t tag, int op) {
  epoll_event event{};
  event.events = events;
  event.data.u64 = tag;
  if (epoll_ctl(epoll, op, fd, &event) < 0) Die("epoll_ctl");
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const int64_t delay_ns = absl::GetFlag(FLAGS_delay_us) * 1000;
  if (delay_ns < 0 || absl::GetFlag(FLAGS_port).empty() || absl::GetFlag(FLAGS_tap).empty()) {
    std::fprintf(stderr, "usage: sim_delay_line --delay_us=N --port=VETH --tap=TAP\n");
    return 2;
  }
  const int port = OpenPort(absl::GetFlag(FLAGS_port));
  const int tap = OpenTap(absl::GetFlag(FLAGS_tap));
  Direction directions[2] = {{port, tap}, {tap, port}};  // to the switch, to the host

  // A sleep ends when a frame is due, not up to 50 us later (the default timer slack).
  prctl(PR_SET_TIMERSLACK, 1UL);
  const int epoll = epoll_create1(EPOLL_CLOEXEC);
  if (epoll < 0) Die("epoll_create1");
  Watch(epoll, port, EPOLLIN, 0, EPOLL_CTL_ADD);
  Watch(epoll, tap, EPOLLIN, 1, EPOLL_CTL_ADD);
  std::printf("ready\n");
  std::fflush(stdout);

  std::vector<char> scratch(kMaxFrame);
  bool waiting_for_room[2] = {false, false};
  int64_t next_due = INT64_MAX;
  for (;;) {
    // Sleep until a frame arrives, the next held one is due, or (where a direction's
    // destination is full: its fd is watched for EPOLLOUT meanwhile) there is room; one
    // system call, with a nanosecond time-out.
    timespec timeout{};
    if (next_due != INT64_MAX) {
      const int64_t wait_ns = std::max<int64_t>(0, next_due - NowNs());
      timeout.tv_sec = wait_ns / 1'000'000'000;
      timeout.tv_nsec = wait_ns % 1'000'000'000;
    }
    epoll_event events[8];
    const int n =
        epoll_pwait2(epoll, events, 8, next_due == INT64_MAX ? nullptr : &timeout, nullptr);
    if (n < 0) {
      if (errno == EINTR) continue;
      Die("epoll_pwait2");
    }
    for (int i = 0; i < n; ++i) {
      if (events[i].events & EPOLLIN) directions[events[i].data.u64].Take(delay_ns, scratch);
    }
    const int64_t now = NowNs();
    next_due = INT64_MAX;
    for (int k = 0; k < 2; ++k) {
      Direction& d = directions[k];
      const bool room = d.Release(now);
      if (room == waiting_for_room[k]) {  // the wait for room begins or ends
        waiting_for_room[k] = !room;
        // The destination fd is the other direction's source: keep its EPOLLIN.
        Watch(epoll, d.to, EPOLLIN | (room ? 0u : EPOLLOUT), 1 - k, EPOLL_CTL_MOD);
      }
      if (room && !d.held.empty()) next_due = std::min(next_due, d.held.front().due_ns);
    }
  }
}
