from sparkpoint_cli import main

main()
