// CRC-32 (IEEE 802.3, the zlib polynomial), slicing-by-8; used to checksum index files.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ragfind::common {

/// Continues a CRC-32: crc32(crc32(0, a), b) == crc32(0, a + b).
std::uint32_t crc32(std::uint32_t crc, const void* data, std::size_t size);

}  // namespace ragfind::common
