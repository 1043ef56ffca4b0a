#include "tiers/nvme/catalog.h"

#include <gtest/gtest.h>
#include <rocksdb/db.h>

#include "tiers/nvme/testing/temp_dir.h"

namespace kvtier::tiers::nvme {
namespace {

CatalogRecord Record(uint64_t i) {
  return {NamespaceId{{1, 2}}, BlockKey{{i, i * 3}}, i * 8192, 4096, i * 77, i};
}

TEST(CatalogTest, PutLoadDeleteAndReopen) {
  testing::TempDir dir;
  std::string path = dir.file("catalog");
  {
    auto cat = Catalog::Open({.path = path});
    ASSERT_TRUE(cat.ok()) << cat.status().ToString();
    for (uint64_t i = 1; i <= 10; ++i) ASSERT_TRUE((*cat)->Put(Record(i)).ok());
    ASSERT_TRUE((*cat)->Delete(Record(3).ns, Record(3).key).ok());
    ASSERT_TRUE((*cat)->WriteMeta(77).ok());
  }
  auto cat = Catalog::Open({.path = path});
  ASSERT_TRUE(cat.ok());
  auto loaded = (*cat)->Load();
  ASSERT_TRUE(loaded.ok());
  EXPECT_EQ(loaded->records.size(), 9u);
  EXPECT_EQ(loaded->undecodable, 0u);
  EXPECT_EQ(**(*cat)->ReadMeta(), 77u);
  ASSERT_TRUE((*cat)->DeleteAllRecords().ok());
  EXPECT_TRUE((*cat)->Load()->records.empty());
  EXPECT_EQ(**(*cat)->ReadMeta(), 77u);  // the meta entry survives a wipe of the records
}

TEST(CatalogTest, NewCatalogHasNoMeta) {
  testing::TempDir dir;
  auto cat = Catalog::Open({.path = dir.file("c")});
  ASSERT_TRUE(cat.ok());
  auto meta = (*cat)->ReadMeta();
  ASSERT_TRUE(meta.ok());
  EXPECT_FALSE(meta->has_value());
  ASSERT_TRUE((*cat)->Sync().ok());
}

TEST(CatalogTest, DestroyRemovesEverything) {
  testing::TempDir dir;
  std::string path = dir.file("c");
  {
    auto cat = Catalog::Open({.path = path});
    ASSERT_TRUE((*cat)->Put(Record(1)).ok());
  }
  ASSERT_TRUE(Catalog::Destroy(path).ok());
  auto cat = Catalog::Open({.path = path});
  EXPECT_TRUE((*cat)->Load()->records.empty());
  EXPECT_TRUE(Catalog::Destroy(dir.file("never-existed")).ok());
}

TEST(CatalogTest, DamagedMetaIsAbsentButAnotherVersionIsRefused) {
  testing::TempDir dir;
  std::string path = dir.file("c");
  {
    auto cat = Catalog::Open({.path = path});
    ASSERT_TRUE((*cat)->WriteMeta(5).ok());
  }
  std::string meta = EncodeCatalogMeta(5);
  meta[10] ^= 1;
  {
    rocksdb::DB* raw = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(rocksdb::Options(), path, &raw).ok());
    ASSERT_TRUE(raw->Put(rocksdb::WriteOptions(), "meta", meta).ok());
    delete raw;
  }
  {
    auto cat = Catalog::Open({.path = path});
    auto read = (*cat)->ReadMeta();
    ASSERT_TRUE(read.ok());
    EXPECT_FALSE(read->has_value());
  }
  meta[0] = 2;  // format version 2
  {
    rocksdb::DB* raw = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(rocksdb::Options(), path, &raw).ok());
    ASSERT_TRUE(raw->Put(rocksdb::WriteOptions(), "meta", meta).ok());
    delete raw;
  }
  auto cat = Catalog::Open({.path = path});
  Status st = (*cat)->ReadMeta().status();
  EXPECT_EQ(st.code(), StatusCode::kCorruption);
  EXPECT_NE(st.message().find("format version 2"), std::string::npos) << st.message();
}

TEST(CatalogTest, OpenFailureNamesThePath) {
  Status st = Catalog::Open({.path = "/proc/kvtier-no-such-dir/catalog"}).status();
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("/proc/kvtier-no-such-dir/catalog"), std::string::npos);
}

}  // namespace
}  // namespace kvtier::tiers::nvme
