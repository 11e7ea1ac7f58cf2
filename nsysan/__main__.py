from nsysan.cli import run

run()
