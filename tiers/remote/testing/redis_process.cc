#include "tiers/remote/testing/redis_process.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <thread>

namespace kvtier::tiers::remote::testing {
namespace {

using std::chrono::milliseconds;

// Whether `op` (::bind or ::connect) succeeds for 127.0.0.1:`port` on a fresh TCP socket.
bool OnLoopback(uint16_t port, int (*op)(int, const sockaddr*, socklen_t)) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool ok = op(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  return ok;
}

// Whether a TCP port on 127.0.0.1 can be bound now (it may be taken a moment later: Start retries).
bool PortFree(uint16_t port) { return OnLoopback(port, ::bind); }

bool Accepts(uint16_t port) { return OnLoopback(port, ::connect); }

// A port whose cluster bus port (port + 10000) is free too, from a random start, so that test
// processes running side by side rarely try the same one. With `tls_port`, the TLS port
// (port + kTlsPortOffset) and its bus port must be free too: with tls-cluster the bus listens at
// the TLS port + 10000.
uint16_t PickPort(bool tls_port) {
  static std::mt19937 rng(std::random_device{}() ^ static_cast<unsigned>(::getpid()));
  // Every port below Linux's ephemeral ones (32768 and up): an outgoing connection (a probe of
  // Accepts, a client's) leaves its local port in TIME_WAIT, where a listener cannot bind, and a
  // server that finds its bus port taken exits after its other listeners opened.
  std::uniform_int_distribution<int> start(10000, 17000);
  const auto free = [](int port) { return PortFree(static_cast<uint16_t>(port)); };
  const int tls = RedisProcess::kTlsPortOffset;
  for (int tries = 0; tries < 1000; ++tries) {
    const int port = start(rng);
    if (free(port) && free(port + 10000) &&
        (!tls_port || (free(port + tls) && free(port + tls + 10000)))) {
      return static_cast<uint16_t>(port);
    }
  }
  return 0;
}

// fork + exec with stdout (and stderr) going to `out_fd`, or /dev/null when -1. The child dies
// with the test process.
pid_t Launch(const std::vector<std::string>& args, int out_fd) {
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(127);  // the parent died before prctl took effect
  const int fd = out_fd >= 0 ? out_fd : ::open("/dev/null", O_WRONLY);
  ::dup2(fd, STDOUT_FILENO);
  ::dup2(fd, STDERR_FILENO);
  ::execv(argv[0], argv.data());
  ::_exit(127);
}

}  // namespace

std::string RedisServerPath() { return REDIS_SERVER_PATH; }
std::string RedisCliPath() { return REDIS_CLI_PATH; }

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string pattern = std::string(base != nullptr ? base : "/tmp") + "/kvtier-redis-XXXXXX";
  if (::mkdtemp(pattern.data()) != nullptr) path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ignored;
  if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
}

Result<std::string> RunProgram(const std::vector<std::string>& args) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return ErrnoStatus(errno, "pipe");
  const pid_t pid = Launch(args, fds[1]);
  ::close(fds[1]);
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fds[0], buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return DeviceError(args[0] + " failed (status " + std::to_string(status) + "): " + out);
  }
  return out;
}

Result<std::string> Cli(uint16_t port, const std::vector<std::string>& args,
                        const std::string& password) {
  std::vector<std::string> argv = {RedisCliPath(), "-h", "127.0.0.1", "-p", std::to_string(port)};
  if (!password.empty()) {
    argv.insert(argv.end(), {"-a", password, "--no-auth-warning"});
  }
  argv.insert(argv.end(), args.begin(), args.end());
  return RunProgram(argv);
}

bool PollUntil(milliseconds timeout, const std::function<bool()>& condition) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    if (condition()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(milliseconds(10));
  }
}

Result<std::unique_ptr<RedisProcess>> RedisProcess::Start(
    const std::string& parent_dir, const std::vector<std::string>& extra_args) {
  const bool tls_port =
      std::find(extra_args.begin(), extra_args.end(), kTlsPortPlaceholder) != extra_args.end();
  for (int attempt = 0; attempt < 5; ++attempt) {
    const uint16_t port = PickPort(tls_port);
    if (port == 0) return Busy("no free loopback port pair for redis-server");
    const std::string dir = parent_dir + "/" + std::to_string(port);
    std::filesystem::create_directories(dir);
    std::vector<std::string> args = {RedisServerPath(),
                                     "--port",
                                     std::to_string(port),
                                     "--bind",
                                     "127.0.0.1",
                                     "--dir",
                                     dir,
                                     "--logfile",
                                     dir + "/redis.log",
                                     "--save",
                                     "",
                                     "--appendonly",
                                     "no",
                                     "--daemonize",
                                     "no"};
    for (const std::string& arg : extra_args) {
      if (arg == kPortPlaceholder) {
        args.push_back(std::to_string(port));
      } else if (arg == kTlsPortPlaceholder) {
        args.push_back(std::to_string(port + kTlsPortOffset));
      } else {
        args.push_back(arg);
      }
    }
    const pid_t pid = Launch(args, -1);
    if (pid < 0) return ErrnoStatus(errno, "fork");
    std::unique_ptr<RedisProcess> process(new RedisProcess(pid, port));
    if (tls_port) process->tls_port_ = static_cast<uint16_t>(port + kTlsPortOffset);
    bool exited = false;
    // Both listeners: a server whose second port was taken meanwhile exits after opening the
    // first, and is started again on other ports.
    const bool up = PollUntil(milliseconds(5000), [&] {
      exited = ::waitpid(pid, nullptr, WNOHANG) == pid;
      return exited || (Accepts(port) && (process->tls_port_ == 0 || Accepts(process->tls_port_)));
    });
    if (up && !exited) return process;
    if (exited) process->pid_ = -1;  // reaped; most likely the port was taken: try another
  }
  return DeviceError("redis-server did not start (see its redis.log under " + parent_dir + ")");
}

RedisProcess::~RedisProcess() { Kill(); }

void RedisProcess::Kill() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, nullptr, 0);
  pid_ = -1;
  stopped_ = false;
}

void RedisProcess::Stop() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGSTOP);
  stopped_ = true;
}

void RedisProcess::Continue() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGCONT);
  stopped_ = false;
}

}  // namespace kvtier::tiers::remote::testing
