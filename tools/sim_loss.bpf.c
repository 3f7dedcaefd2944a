// Random packet loss for tools/sim_network.py where the kernel has no netem: a tc classifier
// (cls_bpf, direct action) on a link's egress that drops each packet with probability
// DROP_BELOW / 2^32, independently (netem's plain `loss P%`). Built by sim_network.py with
// clang -target bpf, DROP_BELOW set per run.
#include <linux/bpf.h>
#include <linux/pkt_cls.h>

#ifndef DROP_BELOW
#error "DROP_BELOW (the loss probability times 2^32) must be defined"
#endif

static unsigned int (*bpf_get_prandom_u32)(void) = (void *)BPF_FUNC_get_prandom_u32;

__attribute__((section("classifier"), used)) int drop_at_random(struct __sk_buff *skb) {
  return bpf_get_prandom_u32() < (unsigned int)DROP_BELOW ? TC_ACT_SHOT : TC_ACT_OK;
}

char _license[] __attribute__((section("license"), used)) = "GPL";
