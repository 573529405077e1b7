// The TLS flags every Kestrel binary that listens or dials shares: --tls_ca, --tls_cert, --tls_key,
// --tls_crl and --insecure (see common/tls.h). Link this library to get them.
#ifndef KESTREL_COMMON_TLS_FLAGS_H_
#define KESTREL_COMMON_TLS_FLAGS_H_

#include "common/tls.h"

namespace kestrel {

// The flags' values (after absl::ParseCommandLine).
TlsConfig TlsConfigFromFlags();

}  // namespace kestrel

#endif  // KESTREL_COMMON_TLS_FLAGS_H_
