// `densegate token create|list|revoke`: the scheduler's tokens file
// (scheduler/tokens.h). A running `densegate serve --tokens FILE` reads the
// file again when it changes.
#include <iostream>
#include <memory>
#include <string>

#include "cli/command.h"
#include "scheduler/tokens.h"

namespace densegate::cli {

namespace {

struct Args {
  std::string tokens;
  std::string role;
  std::string name;
  std::string which;
};

void AddTokensFlag(CLI::App* cmd, Args* args) {
  cmd->add_option("--tokens", args->tokens, "the tokens file `densegate serve --tokens` reads")
      ->required();
}

int Create(const Args& a) {
  std::optional<scheduler::Role> role = scheduler::ParseRole(a.role);
  if (!role.has_value()) {
    std::cerr << "densegate token create: unknown role \"" << a.role
              << "\" (ci, agent, viewer, node, admin)\n";
    return kExitUsage;
  }
  absl::StatusOr<std::string> token = scheduler::CreateToken(a.tokens, *role, a.name);
  if (!token.ok()) {
    std::cerr << "densegate token create: " << token.status().message() << "\n";
    return kExitUsage;
  }
  // The token on stdout alone, for `$(densegate token create ...)`.
  std::cout << *token << "\n";
  std::cerr << "densegate token create: added a " << a.role << " token"
            << (a.name.empty() ? "" : " for " + a.name) << " to " << a.tokens
            << " (only its hash is stored: keep the token now)\n";
  return 0;
}

int List(const Args& a) {
  absl::StatusOr<std::vector<scheduler::TokenEntry>> entries = scheduler::ReadTokens(a.tokens);
  if (!entries.ok()) {
    std::cerr << "densegate token list: " << entries.status().message() << "\n";
    return kExitUsage;
  }
  for (const scheduler::TokenEntry& e : *entries) {
    std::cout << scheduler::RoleName(e.role) << "\t" << e.principal << "\tsha256:"
              << e.hash.substr(0, 12) << "\n";
  }
  return 0;
}

int Revoke(const Args& a) {
  absl::StatusOr<int> removed = scheduler::RevokeTokens(a.tokens, a.which);
  if (!removed.ok()) {
    std::cerr << "densegate token revoke: " << removed.status().message() << "\n";
    return removed.status().code() == absl::StatusCode::kNotFound ? kExitReject : kExitUsage;
  }
  std::cerr << "densegate token revoke: removed " << *removed << " token"
            << (*removed == 1 ? "" : "s") << " from " << a.tokens << "\n";
  return 0;
}

}  // namespace

void AddTokenCommand(CLI::App& app, int* exit_code) {
  CLI::App* token = app.add_subcommand(
      "token", "Manage the scheduler's tokens (stored as SHA-256 hashes; a running server "
               "picks up changes).");
  token->require_subcommand(1);
  auto args = std::make_shared<Args>();

  CLI::App* create = token->add_subcommand(
      "create", "Add a token and print it (shown only this once).");
  create->add_option("--role", args->role, "ci, agent, viewer, node or admin")->required();
  create->add_option("--name", args->name,
                     "principal the audit log records; for a node token, the node's name "
                     "(required), the only node it may act as");
  AddTokensFlag(create, args.get());
  create->callback([args, exit_code] { *exit_code = Create(*args); });

  CLI::App* list = token->add_subcommand("list", "Show each token's role, principal and hash.");
  AddTokensFlag(list, args.get());
  list->callback([args, exit_code] { *exit_code = List(*args); });

  CLI::App* revoke = token->add_subcommand(
      "revoke", "Remove the tokens of a principal, or the one with a hash prefix (8+ digits).");
  revoke->add_option("which", args->which, "principal, or sha256:PREFIX from `token list`")
      ->required();
  AddTokensFlag(revoke, args.get());
  revoke->callback([args, exit_code] { *exit_code = Revoke(*args); });
}

}  // namespace densegate::cli
