// How every Kestrel channel and listener treats a network that fails (a cut link, a partition, a paused peer).
//
// A cut link drops packets silently: TCP alone would keep a dead connection "open" for minutes and gRPC would
// send every call into it until the call's deadline. So clients ping every connection (HTTP/2 keepalive,
// also while no call is active) and close one whose pings go unanswered, and reconnect at most
// kMaxReconnectBackoff apart, so a healed link is in use again within about a second. Listeners accept those
// pings (gRPC's default would answer them with GOAWAY "too_many_pings").
#ifndef KESTREL_COMMON_NETWORK_POLICY_H_
#define KESTREL_COMMON_NETWORK_POLICY_H_

#include <memory>
#include <string>

#include "grpcpp/grpcpp.h"

namespace kestrel {

// Keepalive ping period of an idle connection, and how long a ping may go unanswered before the connection is
// closed (and its calls fail UNAVAILABLE, which callers retry).
inline constexpr int kKeepaliveTimeMs = 2000;
inline constexpr int kKeepaliveTimeoutMs = 2000;
// Reconnect backoff: the first retry after 100 ms, at most 1 s apart; a connect attempt may take 1 s at least
// (gRPC's default connect floor of 20 s would outlast a short partition that drops SYNs).
inline constexpr int kInitialReconnectBackoffMs = 100;
inline constexpr int kMaxReconnectBackoffMs = 1000;
inline constexpr int kMinConnectTimeoutMs = 1000;

// Adds the client side of the policy to `args`.
void ApplyClientNetworkPolicy(grpc::ChannelArguments& args);
// Adds the listener side of the policy to `builder`.
void ApplyListenerNetworkPolicy(grpc::ServerBuilder& builder);
// A channel to `address` with the client policy (and nothing else set).
std::shared_ptr<grpc::Channel> NewChannel(const std::string& address,
                                          const std::shared_ptr<grpc::ChannelCredentials>& credentials);

}  // namespace kestrel

#endif  // KESTREL_COMMON_NETWORK_POLICY_H_
